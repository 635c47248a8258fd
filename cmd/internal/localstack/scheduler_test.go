package localstack

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/topology"
)

// A scheduled run of the local stack lasts past the request deadline every
// HTTP function has (REQUEST_TIMEOUT), as it does in the cloud, and
// stopping the stack ends it promptly.
func TestSchedulerRunOutlivesTheRequestAndStopsWithTheStack(t *testing.T) {
	const requestTimeout = 50 * time.Millisecond
	type seen struct{ request, run context.Context }
	started := make(chan seen, 4)
	ended := make(chan error, 4)
	job := httpx.Job("POST /internal/job", time.Hour, nil, func(ctx context.Context, _ struct{}) (struct{}, error) {
		select {
		case started <- seen{request: runRequest(ctx), run: ctx}:
		default:
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		ended <- ctx.Err()
		return struct{}{}, nil
	})
	h := httpx.Standard("Job", "local-project", nil, requestTimeout)(keepRequest(job))
	top := &topology.Topology{
		Functions: []topology.Function{{Name: "Job", Kind: topology.KindScheduled, Routes: []string{"/internal/job"}}},
		Scheduler: []topology.Scheduled{{Name: "job", Function: "Job", Schedule: "* * * * *", Body: map[string]any{}}},
	}
	sched, err := StartScheduler(top, map[string]http.Handler{"Job": h})
	if err != nil {
		t.Fatal(err)
	}
	stopping := false
	defer func() {
		if !stopping {
			sched.Stop()
		}
	}()

	var s seen
	select {
	case s = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the every-minute job did not run when the scheduler started")
	}
	<-s.request.Done()
	if err := s.run.Err(); err != nil {
		t.Fatalf("the run ended with its request's deadline: %v", err)
	}

	stopping = true
	done := make(chan struct{})
	go func() {
		sched.Stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stopping the scheduler did not end the running job")
	}
	if err := <-ended; err != context.Canceled {
		t.Errorf("the run's context after the stack stopped: %v, want canceled", err)
	}
}

type requestKey struct{}

// keepRequest hands the run the request's own context, deadline included,
// for the test to watch it pass.
func keepRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestKey{}, r.Context())))
	})
}

func runRequest(ctx context.Context) context.Context {
	return ctx.Value(requestKey{}).(context.Context)
}
