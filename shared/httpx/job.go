package httpx

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// Job is the handler of a scheduled job, the one shape of every
// POST /internal/<job> that Cloud Scheduler calls (and an operator calls
// bare, to run the job now). It serves pattern ("POST /internal/rollup"),
// starts from body(bare) — the job's defaults, bare saying the request has
// no body; nil is the zero B — and decodes the JSON body over it, so that a
// field left out keeps its default. run gets a context detached from the
// request's, because a run outlives the public functions' request deadline
// and the scheduler's attempt; it ends after timeout, or earlier when the
// caller marked the request with JobStopsWith and that stop ends. Its
// report is answered 200 as JSON with Cache-Control: no-store, its error as
// every handler's error.
func Job[B, R any](pattern string, timeout time.Duration, body func(bare bool) B, run func(ctx context.Context, b B) (R, error)) http.Handler {
	rt := NewRouter()
	rt.Handle(pattern, func(w http.ResponseWriter, r *http.Request) error {
		var b B
		bare := r.ContentLength == 0
		if body != nil {
			b = body(bare)
		}
		if !bare {
			if err := DecodeJSON(w, r, &b); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
		defer cancel()
		if stop, ok := r.Context().Value(jobStop{}).(context.Context); ok {
			defer context.AfterFunc(stop, cancel)()
		}
		rep, err := run(ctx, b)
		if err != nil {
			return err
		}
		w.Header().Set("Cache-Control", "no-store")
		WriteJSON(w, http.StatusOK, rep)
		return nil
	})
	return rt
}

type jobStop struct{}

// JobStopsWith marks a job's request context so that its run, which lasts
// its own deadline as in the cloud, also ends when stop does: the local
// stack's scheduler calls jobs in process and, stopping, ends their runs.
// The request's own deadline (REQUEST_TIMEOUT) still does not end the run.
func JobStopsWith(ctx, stop context.Context) context.Context {
	return context.WithValue(ctx, jobStop{}, stop)
}

// LogJobFailure logs a failure of a job's run, or of one of its steps, at
// ERROR — or at INFO when the run was canceled (its JobStopsWith stop
// ended, as when the local stack stops): it then failed because it was
// stopped, and the next run does its work. A run past its deadline is an
// error. args are slog's key-value pairs.
func LogJobFailure(ctx context.Context, msg string, err error, args ...any) {
	args = append(args, "error", err.Error())
	if errors.Is(ctx.Err(), context.Canceled) {
		slog.InfoContext(ctx, msg+" (the run was stopped)", args...)
		return
	}
	slog.ErrorContext(ctx, msg, args...)
}
