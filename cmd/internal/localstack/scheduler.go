package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/topology"
)

// Scheduler calls the scheduled functions on their Cloud Scheduler
// schedules, in process. With two regions each runs its own, as Cloud
// Scheduler fires every job in both prod regions; the jobs' leases make
// each job's work happen once.
type Scheduler struct {
	cron *cron.Cron
	// jobs is the context of the jobs' requests and stops their runs
	// (httpx.JobStopsWith) when stopJobs ends it.
	jobs     context.Context
	stopJobs context.CancelFunc
	// atOnce are the runs started with the stack, outside cron.
	atOnce sync.WaitGroup
}

// Log lines of the scheduler: one when a job's run starts, one when it
// ends (with its status and how long it ran). The two-region drill reads
// them to tell which runs overlapped.
const (
	LogJobStarted = "scheduled job started"
	LogJobRan     = "scheduled job ran"
)

// StartScheduler starts the jobs' schedules. The jobs of every minute also
// run at once: in the cloud their scheduler has been calling them all
// along, and a stack started mid-minute would otherwise fold no staged
// views (nor anything else of theirs) until the next minute.
func StartScheduler(top *topology.Topology, handlers map[string]http.Handler) (*Scheduler, error) {
	s := &Scheduler{cron: cron.New()}
	var now []func()
	for _, job := range top.Scheduler {
		h, ok := handlers[job.Function]
		fn, _ := top.Function(job.Function)
		if !ok || len(fn.Routes) == 0 {
			return nil, fmt.Errorf("scheduler job %s: no function %s", job.Name, job.Function)
		}
		// Cloud Scheduler calls the function's URL at its route, as here.
		route := fn.Routes[0]
		body, err := json.Marshal(job.Body)
		if err != nil {
			return nil, err
		}
		name := job.Name
		run := func() {
			req := httptest.NewRequestWithContext(httpx.JobStopsWith(s.jobs, s.jobs), http.MethodPost, route, strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			start := time.Now()
			slog.Info(LogJobStarted, "job", name)
			h.ServeHTTP(rec, req)
			slog.Info(LogJobRan, "job", name, "status", rec.Code, "seconds", time.Since(start).Seconds())
		}
		if _, err := s.cron.AddFunc(job.Schedule, run); err != nil {
			return nil, fmt.Errorf("scheduler job %s: %w", name, err)
		}
		if job.Schedule == "* * * * *" {
			now = append(now, run)
		}
	}
	s.jobs, s.stopJobs = context.WithCancel(context.Background())
	s.cron.Start()
	for _, run := range now {
		s.atOnce.Go(run)
	}
	return s, nil
}

// Stop starts no more jobs, ends the running ones (httpx.JobStopsWith) and
// waits for them to return: a job cut off by the clients closing under it
// would log its work as failed.
func (s *Scheduler) Stop() {
	s.stopJobs()
	<-s.cron.Stop().Done()
	s.atOnce.Wait()
}
