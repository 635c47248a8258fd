package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/errs"
)

type jobBody struct {
	Once bool `json:"once"`
	N    int  `json:"n"`
}

type jobReport struct {
	Body        jobBody `json:"body"`
	HasDeadline bool    `json:"hasDeadline"`
}

// TestJob checks the shape every scheduled job shares: the defaults of a
// bare POST, a body decoded over them, a context that outlives the
// request's, the report as JSON with no-store, and errors as every
// handler's.
func TestJob(t *testing.T) {
	var runErr error
	h := Job("POST /internal/job", time.Hour,
		func(bare bool) jobBody { return jobBody{Once: bare, N: 7} },
		func(ctx context.Context, b jobBody) (jobReport, error) {
			runErr = ctx.Err()
			if b.N < 0 {
				return jobReport{}, InvalidField(errs.InvalidValue, "n", "n must not be negative")
			}
			if b.N == 99 {
				return jobReport{}, errs.ErrBackendUnavailable
			}
			_, ok := ctx.Deadline()
			return jobReport{Body: b, HasDeadline: ok}, nil
		})
	serve := func(method, body string, cancelled bool) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, "/internal/job", strings.NewReader(body))
		if cancelled {
			ctx, cancel := context.WithCancel(req.Context())
			cancel()
			req = req.WithContext(ctx)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, c := range []struct {
		name, body string
		want       jobBody
	}{
		{"bare", ``, jobBody{Once: true, N: 7}},
		{"empty object keeps the defaults of a body", `{}`, jobBody{N: 7}},
		{"fields override", `{"once":true,"n":3}`, jobBody{Once: true, N: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := serve("POST", c.body, true)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, body %s", rec.Code, rec.Body)
			}
			if got := rec.Header().Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control = %q, want no-store", got)
			}
			var rep jobReport
			if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(jobReport{Body: c.want, HasDeadline: true}, rep); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			// The request was cancelled before the run: the run's context
			// is not, and ends only at its own deadline.
			if err := runErr; err != nil {
				t.Errorf("run context ended with the request: %v", err)
			}
		})
	}
	checkError(t, serve("POST", `{"n":-1}`, false), wantErr{code: 400, status: "INVALID_ARGUMENT", reason: errs.InvalidValue, message: "n must not be negative", field: "n"})
	checkError(t, serve("POST", `{"n":"x"}`, false), wantErr{code: 400, status: "INVALID_ARGUMENT", reason: errs.WrongFieldType, message: `field "n" must be a JSON number`, field: "n"})
	checkError(t, serve("POST", `{"m":1}`, false), wantErr{code: 400, status: "INVALID_ARGUMENT", reason: errs.UnknownField, message: `unknown field "m"`, field: "m"})
	if rec := serve("POST", `{"n":99}`, false); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("backend down: status %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := serve("GET", ``, false); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", rec.Code)
	}
}

// A run marked JobStopsWith (the local stack's scheduler) outlives its
// request's deadline, as in the cloud, and ends promptly when its stop does.
func TestJobOutlivesItsRequestAndEndsWithItsStop(t *testing.T) {
	var reqCtx context.Context
	outlived := make(chan error, 1)
	ended := make(chan error, 1)
	job := Job("POST /internal/job", time.Hour, nil, func(ctx context.Context, _ jobBody) (jobReport, error) {
		<-reqCtx.Done()
		outlived <- ctx.Err()
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		ended <- ctx.Err()
		return jobReport{}, nil
	})
	// The request deadline of every HTTP function, and a look at the
	// request's context under it.
	h := Chain(job, Timeout(20*time.Millisecond), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqCtx = r.Context()
			next.ServeHTTP(w, r)
		})
	})
	stop, stopJobs := context.WithCancel(context.Background())
	defer stopJobs()
	served := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(JobStopsWith(stop, stop), "POST", "/internal/job", nil))
		served <- rec.Code
	}()
	if err := <-outlived; err != nil {
		t.Fatalf("run context ended with its request's deadline: %v", err)
	}
	stopJobs()
	select {
	case err := <-ended:
		if err != context.Canceled {
			t.Errorf("run context after its stop: %v, want canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end when its stop did")
	}
	if code := <-served; code != http.StatusOK {
		t.Errorf("status %d, want 200", code)
	}
}

// A failure of a run canceled with its request (the local stack stopping)
// is logged at INFO; that of a live run, or of one past its deadline, at
// ERROR.
func TestLogJobFailureLevel(t *testing.T) {
	var logs strings.Builder
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	late, cancelLate := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelLate()
	for _, c := range []struct {
		name  string
		ctx   context.Context
		level string
	}{
		{"live", context.Background(), "level=ERROR"},
		{"canceled", canceled, "level=INFO"},
		{"past its deadline", late, "level=ERROR"},
	} {
		logs.Reset()
		LogJobFailure(c.ctx, "job: step failed", errors.New("spanner down"), "n", 1)
		if got := logs.String(); !strings.Contains(got, c.level) || !strings.Contains(got, "n=1") {
			t.Errorf("%s run: logged %q, want %s with its arguments", c.name, got, c.level)
		}
	}
}
