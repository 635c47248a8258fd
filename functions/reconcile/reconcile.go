// Package reconcilefn is the Reconcile function (POST /internal/reconcile,
// called by Cloud Scheduler with OIDC): body {"scope":"recent"} hourly brings
// the reaction tallies up to date with flag changes, then starts a run of the
// counters whose truth moved since the previous hourly run; {"scope":"all"}
// daily starts a run of every counter; either run is cut into key-range
// slices with stored cursors and worked until done or out of time;
// {"scope":"slices"} each minute works the open slices of any run (each under
// its lease, from its cursor), so that a run of any size finishes over many
// invocations, in parallel when they overlap. A bare POST is "all".
// Each source of truth registered in Sources recounts its fields; a counter
// that differs gets a correction delta (see reconcilestore.Store.Reconcile).
package reconcilefn

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterHTTP("Reconcile", host.NeedSpanner,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			db := spannerdb.Wrap(c.Spanner, c.Config)
			store := reconcilestore.New(db, reconcilestore.Options{})
			return New(Deps{Store: store, Flags: reactionstore.New(db), Sources: Sources(), Metrics: c.Metrics}), nil
		})
}

// Sources are the sources of truth reconciled. Each feature that owns
// counted fields adds its reconcilestore.Source here (comments: comments and
// replies).
func Sources() []reconcilestore.Source {
	return []reconcilestore.Source{reactionstore.Source{}, commentstore.Source{}}
}

// Store reconciles counters.
type Store interface {
	ReconcileUntil(ctx context.Context, scope reconcilestore.Scope, sources []reconcilestore.Source, until time.Time) (reconcilestore.Report, error)
	WorkSlices(ctx context.Context, sources []reconcilestore.Source, o reconcilestore.WorkOptions) (reconcilestore.WorkReport, error)
	CloseRun(ctx context.Context, run string) (reconcilestore.RunStatus, bool, error)
}

// Flags brings the reaction tallies up to date with flag changes, and
// completes the tallies of items whose rows predate them
// (*reactionstore.Store).
type Flags interface {
	ApplyFlags(ctx context.Context, until time.Time) (reactionstore.FlagReport, error)
	BackfillTallies(ctx context.Context, until time.Time) (reactionstore.BackfillReport, error)
}

// scopeSlices works the open slices of every run.
const scopeSlices = "slices"

// DefaultTimeout bounds a run when Deps leaves Timeout unset, as deployed.
const DefaultTimeout = 9 * time.Minute

// margin is left of Timeout to finish the batch under way and answer.
const margin = 30 * time.Second

// Deps are the handler's collaborators.
type Deps struct {
	Store   Store
	Flags   Flags // nil: no tallies to bring up to date
	Sources []reconcilestore.Source
	// Timeout bounds one run (the daily run reads every counter).
	Timeout time.Duration
	Metrics *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

// New builds the Reconcile handler.
func New(d Deps) http.Handler {
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	h := &handler{d}
	// A bare POST (an operator's "reconcile now") checks every counter.
	// A daily run outlives the public functions' request deadline.
	return httpx.Job("POST /internal/reconcile", h.Timeout,
		func(bool) body { return body{Scope: string(reconcilestore.All)} }, h.run)
}

type body struct {
	Scope string `json:"scope"`
}

func (h *handler) run(ctx context.Context, b body) (any, error) {
	scope := reconcilestore.Scope(b.Scope)
	if scope != reconcilestore.Recent && scope != reconcilestore.All && scope != scopeSlices {
		return nil, httpx.InvalidField(errs.InvalidValue, "scope", `scope must be "recent", "all" or "slices"`)
	}
	// Batches stop being taken up a margin before the end, the rest waits
	// in the slices' cursors.
	until := time.Now().Add(h.Timeout - min(margin, h.Timeout/4))
	started := time.Now()
	if scope == scopeSlices {
		rep, err := h.Store.WorkSlices(ctx, h.Sources, reconcilestore.WorkOptions{Until: until})
		if err != nil {
			return nil, err
		}
		h.record(ctx, rep.Report)
		if rep.Slices > 0 {
			slog.InfoContext(ctx, "reconcile: slices worked", "slices", rep.Slices, "finished", rep.Finished, "held", rep.Held,
				"checked", rep.Checked, "corrected", rep.Corrected, "skipped", rep.Skipped, "duration", time.Since(started).String())
		}
		for _, run := range rep.Runs {
			if err := h.close(ctx, run); err != nil {
				return nil, err
			}
		}
		return rep, nil
	}
	if h.Flags != nil {
		// Both runs take the tallies' rows as the reactions' truth: the
		// flag changes are brought into them first. The hourly run, which
		// trusts the tallies, waits for the next invocation when they are
		// not all in (its next run covers this hour's counters too).
		fl, err := h.Flags.ApplyFlags(ctx, until)
		if err != nil {
			return nil, err
		}
		if !fl.Done && scope == reconcilestore.Recent {
			slog.WarnContext(ctx, "reconcile: flag changes not all in the tallies yet; the hourly run waits for the next invocation",
				"accounts", fl.Users, "moved", fl.Moved, "duration", time.Since(started).String())
			return reconcilestore.Report{Scope: scope, Corrections: []reconcilestore.Correction{}}, nil
		}
		// Items whose rows predate the tallies are recounted from their
		// rows by every pass until their tally is complete: a third of
		// the invocation completes tallies (one row read once all are).
		bf, err := h.Flags.BackfillTallies(ctx, started.Add(until.Sub(started)/3))
		if err != nil {
			return nil, err
		}
		if bf.Items > 0 || !bf.Done {
			slog.InfoContext(ctx, "reconcile: tallies completed", "items", bf.Items, "moved", bf.Moved, "done", bf.Done,
				"duration", time.Since(started).String())
		}
	}
	rep, err := h.Store.ReconcileUntil(ctx, scope, h.Sources, until)
	if err != nil {
		return nil, err
	}
	h.record(ctx, rep)
	switch {
	case rep.Done:
		if err := h.close(ctx, rep.Run); err != nil {
			return nil, err
		}
	default:
		slog.InfoContext(ctx, "reconcile: run continues in the per-minute invocations", "run", rep.Run,
			"checked", rep.Checked, "corrected", rep.Corrected, "duration", time.Since(started).String())
	}
	return rep, nil
}

// close reports a finished run once, whichever invocation
// finished its last slice: "reconcile: done" with the run's stored figures.
func (h *handler) close(ctx context.Context, run string) error {
	st, closed, err := h.Store.CloseRun(ctx, run)
	if err != nil || !closed {
		return err
	}
	// One line per run: Terraform's log-based metric counts the runs that
	// corrected many counters (monitoring.tf).
	slog.InfoContext(ctx, "reconcile: done", "scope", st.Scope, "run", run, "slices", st.Slices,
		"invocations", st.Invocations, "checked", st.Checked, "corrected", st.Corrected, "skipped", st.Skipped)
	return nil
}

// record counts this invocation's corrections in the metrics.
func (h *handler) record(ctx context.Context, rep reconcilestore.Report) {
	for _, c := range rep.Corrections {
		for _, f := range counter.Fields {
			if d := c.Delta.Get(f); d != 0 {
				h.Metrics.ReconcileCorrection(ctx, string(f), d)
			}
		}
	}
}
