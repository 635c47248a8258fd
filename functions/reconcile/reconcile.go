// Package reconcile is the Reconcile function (POST /internal/reconcile,
// called by Cloud Scheduler with OIDC): body {"scope":"recent"} hourly checks
// the counters that moved in the last hour, {"scope":"all"} daily checks all;
// a bare POST checks all.
// Each source of truth registered in Sources recounts its fields; a counter
// that differs gets a correction delta (see counterstore.Reconcile).
package reconcile

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/platform"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	platform.RegisterHTTP("Reconcile", platform.NeedSpanner,
		func(ctx context.Context, c *platform.Clients) (http.Handler, error) {
			store := counterstore.New(spannerdb.Wrap(c.Spanner, c.Config), counterstore.Options{})
			return New(Deps{Store: store, Sources: Sources(), Metrics: c.Metrics}), nil
		})
}

// Sources are the sources of truth reconciled. Each feature that owns
// counted fields adds its counterstore.Source here (comments: comments and
// replies).
func Sources() []counterstore.Source {
	return []counterstore.Source{reactionstore.Source{}, commentstore.Source{}}
}

// Store reconciles counters.
type Store interface {
	Reconcile(ctx context.Context, scope counterstore.Scope, sources []counterstore.Source) (counterstore.ReconcileReport, error)
}

// Deps are the handler's collaborators.
type Deps struct {
	Store   Store
	Sources []counterstore.Source
	// Timeout bounds one run (the daily run reads every counter).
	Timeout time.Duration
	Metrics *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

// New builds the Reconcile handler.
func New(d Deps) http.Handler {
	if d.Timeout <= 0 {
		d.Timeout = 9 * time.Minute
	}
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("POST /internal/reconcile", h.post)
	return rt
}

type body struct {
	Scope string `json:"scope"`
}

func (h *handler) post(w http.ResponseWriter, r *http.Request) error {
	// A bare POST (an operator's "reconcile now") checks every counter.
	b := body{Scope: string(counterstore.All)}
	if r.ContentLength != 0 {
		if err := httpx.DecodeJSON(w, r, &b); err != nil {
			return err
		}
	}
	scope := counterstore.Scope(b.Scope)
	if scope != counterstore.Recent && scope != counterstore.All {
		return httpx.InvalidArgument(`scope must be "recent" or "all"`)
	}
	// A daily run outlives the public functions' request deadline.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.Timeout)
	defer cancel()
	started := time.Now()
	rep, err := h.Store.Reconcile(ctx, scope, h.Sources)
	if err != nil {
		return err
	}
	for _, c := range rep.Corrections {
		for _, f := range counter.Fields {
			if d := c.Delta.Get(f); d != 0 {
				h.Metrics.ReconcileCorrection(ctx, string(f), d)
			}
		}
	}
	slog.InfoContext(ctx, "reconcile: done", "scope", scope, "checked", rep.Checked, "corrected", rep.Corrected,
		"skipped", rep.Skipped, "duration", time.Since(started).String())
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, rep)
	return nil
}
