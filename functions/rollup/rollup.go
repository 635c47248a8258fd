// Package rollup is the Rollup function (POST /internal/rollup, called by
// Cloud Scheduler each minute with OIDC). Inside the minute it ticks every
// ROLLUP_INTERVAL: each tick folds the shards of the counters that moved into
// their snapshots and sets their shard counts. The first tick also
// republishes outbox events whose message was lost.
//
// Body: {"once":false} (Cloud Scheduler's) runs the minute; {"once":true} or
// no body at all (an operator's "roll up now") runs one tick and answers at once.
package rollup

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/platform"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	platform.RegisterHTTP("Rollup", platform.NeedSpanner|platform.NeedPubSub,
		func(ctx context.Context, c *platform.Clients) (http.Handler, error) {
			cfg := c.Config
			mode, err := counterstore.ParseMode(cfg.Counters.Mode)
			if err != nil {
				return nil, err
			}
			store := counterstore.New(spannerdb.Wrap(c.Spanner, cfg), counterstore.Options{
				Mode:           mode,
				Policy:         counter.ShardPolicy{WritesPerShard: cfg.Counters.ShardWritesPerSecond, MinWindow: counter.DefaultShardPolicy.MinWindow},
				RollupInterval: cfg.Counters.RollupInterval,
			})
			return New(Deps{
				Store:      store,
				Publisher:  bus.NewPublisher(c.PubSub, cfg.PubSub.CounterTopic),
				Interval:   cfg.Counters.RollupInterval,
				RelayAfter: cfg.Counters.RelayAfter,
				Metrics:    c.Metrics,
			}), nil
		})
}

// Store folds counters and lists lost outbox events.
type Store interface {
	Fold(ctx context.Context) (counterstore.FoldStats, error)
	Stale(ctx context.Context, age time.Duration) ([]events.Event, error)
}

// Deps are the handler's collaborators.
type Deps struct {
	Store      Store
	Publisher  events.Publisher
	Interval   time.Duration
	RelayAfter time.Duration
	// Period is the time one invocation covers (Cloud Scheduler's minute).
	Period  time.Duration
	Metrics *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

// New builds the Rollup handler.
func New(d Deps) http.Handler {
	if d.Interval <= 0 {
		d.Interval = 5 * time.Second
	}
	if d.Period <= 0 {
		d.Period = time.Minute
	}
	if d.RelayAfter <= 0 {
		d.RelayAfter = 2 * time.Minute
	}
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("POST /internal/rollup", h.post)
	return rt
}

type body struct {
	Once bool `json:"once"`
}

// Report is the answer: what the invocation did.
type Report struct {
	Ticks    int            `json:"ticks"`
	Counters int            `json:"counters"`
	Shards   int            `json:"shards"`
	Resized  map[string]int `json:"resized"`
	Relayed  int            `json:"relayed"`
	Errors   int            `json:"errors"`
}

func (h *handler) post(w http.ResponseWriter, r *http.Request) error {
	b := body{Once: r.ContentLength == 0}
	if r.ContentLength != 0 {
		if err := httpx.DecodeJSON(w, r, &b); err != nil {
			return err
		}
	}
	start := time.Now()
	// The minute outlives the request deadline of the public functions; it
	// ends by itself before the next invocation starts.
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), start.Add(h.Period+10*time.Second))
	defer cancel()
	rep := Report{Resized: map[string]int{}}

	evs, err := h.Store.Stale(ctx, h.RelayAfter)
	if err == nil && len(evs) > 0 {
		err = events.PublishAll(ctx, h.Publisher, evs)
	}
	if err != nil {
		rep.Errors++
		slog.ErrorContext(ctx, "rollup: outbox relay failed; the next minute retries", "error", err.Error())
	} else if len(evs) > 0 {
		rep.Relayed = len(evs)
		slog.WarnContext(ctx, "rollup: republished outbox events whose message was lost", "events", len(evs))
	}

	until := start.Add(h.Period - h.Interval/2)
	if b.Once {
		until = start
	}
	// Rollup lag: the time since the previous successful fold, the longest
	// any shard waited to be folded (the alert also fires when it stops).
	lastFold := start
	var maxLag time.Duration
	h.tick(ctx, until, func(st counterstore.FoldStats, err error) {
		rep.Ticks++
		now := time.Now()
		if err != nil {
			rep.Errors++
			slog.ErrorContext(ctx, "rollup: fold failed; the next tick retries", "error", err.Error())
			return
		}
		h.Metrics.RollupLag(ctx, now.Sub(lastFold))
		maxLag = max(maxLag, now.Sub(lastFold))
		lastFold = now
		rep.Counters += st.Counters
		rep.Shards += st.Shards
		for k, n := range st.Resized {
			h.Metrics.CounterShards(ctx, n)
			rep.Resized[k] = n
			slog.InfoContext(ctx, "rollup: shard count changed", "counterKey", k, "shards", n)
		}
	})
	// One line per run: Terraform's log-based metric rollup_lag reads
	// lagSeconds from it (monitoring.tf), so the alert exists on a fresh
	// project before any metric was written, and its absence means the rollup
	// stopped.
	// A run whose folds all failed reports the whole run as lag.
	maxLag = max(maxLag, time.Since(lastFold))
	slog.InfoContext(ctx, "rollup: done", "ticks", rep.Ticks, "errors", rep.Errors, "lagSeconds", maxLag.Seconds())
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, rep)
	return nil
}

// tick folds every interval until until (at least once).
func (h *handler) tick(ctx context.Context, until time.Time, report func(counterstore.FoldStats, error)) {
	s, interval := h.Store, h.Interval
	for {
		started := time.Now()
		st, err := s.Fold(ctx)
		h.Metrics.RollupDuration(ctx, time.Since(started))
		report(st, err)
		next := started.Add(interval)
		if !next.Before(until) || ctx.Err() != nil {
			return
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
