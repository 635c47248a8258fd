// Package rollupfn is the Rollup function (POST /internal/rollup, called by
// Cloud Scheduler each minute with OIDC). Inside the minute it ticks every
// ROLLUP_INTERVAL: each tick folds the shards of the counters that moved into
// their snapshots and sets their shard counts. The first tick also
// republishes outbox events whose message was lost. Beside it, every
// VIEWS_FOLD_INTERVAL, it folds the views that ApplyViews staged in Bigtable
// (shared/views.Fold): many batches of many videos a Spanner commit.
//
// Body: {"once":false,"partition":i,"partitions":n} (Cloud Scheduler's, one
// job per partition) runs the minute over partition i of n of the moved
// counters (foldstore.Pass: disjoint hash ranges), holding the
// partition's lease (JobLeases) for the minute: an invocation of the same
// job that finds it held leaves the counters to its holder, so two
// instances never fold the same counter at once, and folds only the
// partition's staged views for its minute. {"once":true} or no body at all (an operator's "roll up
// now") runs one tick without the lease and answers at once (a fold is one
// transaction per batch, so it stays exact beside a scheduled one).
//
// Each run also looks for stalled counters: changes accepted longer than
// COUNTER_STALL_AFTER ago and still not counted — outbox rows, which the
// relay has republished in vain, and staged views batches, which the folds
// did not count. It logs them in one line (LogStalled), which a log-based
// metric counts and an alert watches (terraform/modules/engagement).
package rollupfn

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/viewstore"
)

func init() {
	host.RegisterHTTP("Rollup", host.NeedSpanner|host.NeedBigtable|host.NeedPubSub,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			cfg := c.Config
			db := spannerdb.Wrap(c.Spanner, cfg)
			outbox := outboxstore.New(db)
			staging := viewstore.NewStaging(c.BigtableTx)
			return New(Deps{
				Store:         Stores(foldstore.FromConfig(db, cfg.Counters), outbox, leasestore.New(db, nil)),
				Publisher:     bus.NewPublisher(c.PubSub, cfg.PubSub.CounterTopic),
				Interval:      cfg.Counters.RollupInterval,
				RelayAfter:    cfg.Counters.RelayAfter,
				Views:         FoldViews(staging, outbox),
				ViewsInterval: cfg.Counters.ViewsFoldInterval,
				Staged:        staging,
				StallAfter:    cfg.Counters.StallAfter,
				Metrics:       c.Metrics,
			}), nil
		})
}

// Store folds counters, lists lost outbox events and holds leases.
type Store interface {
	FoldPart(ctx context.Context, o foldstore.Pass) (foldstore.Stats, error)
	Stale(ctx context.Context, age time.Duration) ([]events.Event, error)
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, name, holder string) error
}

// Stores is the Store over the fold's, the outbox's and the leases' stores.
func Stores(folds *foldstore.Store, outbox *outboxstore.Store, leases *leasestore.Store) Store {
	return stores{folds, outbox, leases}
}

type stores struct {
	folds  *foldstore.Store
	outbox *outboxstore.Store
	leases *leasestore.Store
}

func (s stores) FoldPart(ctx context.Context, o foldstore.Pass) (foldstore.Stats, error) {
	return s.folds.FoldPart(ctx, o)
}

func (s stores) Stale(ctx context.Context, age time.Duration) ([]events.Event, error) {
	return s.outbox.Stale(ctx, age)
}

func (s stores) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	return s.leases.Lease(ctx, name, holder, ttl)
}

func (s stores) Release(ctx context.Context, name, holder string) error {
	return s.leases.Release(ctx, name, holder)
}

// Staged lists the views batches staged before a time and still waiting.
type Staged interface {
	StagedBefore(ctx context.Context, lo, hi int, t time.Time, limit int) ([]views.Batch, error)
}

// ViewsFolder folds the staged views of parts [o.Lo, o.Hi).
type ViewsFolder func(ctx context.Context, o views.FoldOptions) (views.FoldStats, error)

// FoldViews is the views fold of staging into counters.
func FoldViews(staging views.Staging, counters views.Counters) ViewsFolder {
	return func(ctx context.Context, o views.FoldOptions) (views.FoldStats, error) {
		return views.Fold(ctx, staging, counters, o)
	}
}

// Deps are the handler's collaborators. A duration left zero is the
// configuration's default (config.Defaults): ROLLUP_INTERVAL,
// COUNTER_RELAY_AFTER, VIEWS_FOLD_INTERVAL, COUNTER_STALL_AFTER.
type Deps struct {
	Store      Store
	Publisher  events.Publisher
	Interval   time.Duration
	RelayAfter time.Duration
	// Period is the time one invocation covers (Cloud Scheduler's minute).
	Period time.Duration
	// Workers is how many fold transactions a tick runs at once (default
	// foldstore.DefaultWorkers).
	Workers int
	// Views folds the staged views every ViewsInterval (nil: none).
	Views         ViewsFolder
	ViewsInterval time.Duration
	// Staged lists the staged views batches for the stalled check (nil:
	// outbox rows only); StallAfter is the age of an uncounted change that
	// makes its counter stalled.
	Staged     Staged
	StallAfter time.Duration
	Metrics    *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

// DefaultPeriod is the time one invocation covers: Cloud Scheduler's minute.
const DefaultPeriod = time.Minute

// RunTimeout bounds an invocation covering period: the period and a margin
// to finish its last tick. Scheduled runs of a partition overlap by that
// margin, which the partition's lease allows.
func RunTimeout(period time.Duration) time.Duration { return period + 10*time.Second }

// New builds the Rollup handler.
func New(d Deps) http.Handler {
	def := config.Defaults().Counters
	if d.Interval <= 0 {
		d.Interval = def.RollupInterval
	}
	if d.Period <= 0 {
		d.Period = DefaultPeriod
	}
	if d.RelayAfter <= 0 {
		d.RelayAfter = def.RelayAfter
	}
	if d.ViewsInterval <= 0 {
		d.ViewsInterval = def.ViewsFoldInterval
	}
	if d.StallAfter <= 0 {
		d.StallAfter = def.StallAfter
	}
	h := &handler{d}
	// The minute outlives the request deadline of the public functions; it
	// ends by itself before the next invocation starts.
	return httpx.Job("POST /internal/rollup", RunTimeout(h.Period),
		func(bare bool) body { return body{Once: bare} }, h.run)
}

type body struct {
	Once       bool `json:"once"`
	Partition  int  `json:"partition"`
	Partitions int  `json:"partitions"`
}

// Report is the answer: what the invocation did.
type Report struct {
	Ticks    int            `json:"ticks"`
	Counters int            `json:"counters"`
	Shards   int            `json:"shards"`
	Resized  map[string]int `json:"resized"`
	Relayed  int            `json:"relayed"`
	// ViewFolds, ViewBatches and ViewsApplied are the views folds, the
	// staged batches they read and the view events they counted.
	ViewFolds    int `json:"viewFolds"`
	ViewBatches  int `json:"viewBatches"`
	ViewsApplied int `json:"viewsApplied"`
	Errors       int `json:"errors"`
	// Stalled counts the counters found stalled (see LogStalled).
	Stalled int `json:"stalled"`
	// Held says another invocation holds the partition: this one did nothing.
	Held bool `json:"held,omitempty"`
}

func (h *handler) run(ctx context.Context, b body) (Report, error) {
	if b.Partitions == 0 {
		b.Partitions = 1
	}
	if _, _, err := counter.PartRange(b.Partition, b.Partitions); err != nil {
		return Report{}, httpx.InvalidField(errs.InvalidValue, "partition", "%s", err.Error())
	}
	start := time.Now()
	end, _ := ctx.Deadline()
	rep := Report{Resized: map[string]int{}}

	if !b.Once {
		lease, holder := fmt.Sprintf("rollup/%d/%d", b.Partitions, b.Partition), leasestore.NewHolder()
		got, err := h.Store.Lease(ctx, lease, holder, time.Until(end))
		if err != nil {
			return Report{}, err
		}
		if !got {
			// Held by a run that started off the minute (late, or whose
			// instance died holding it until its lease expires): leave the
			// counters to it, but fold the staged views all the same, as
			// a staged view is not visible until folded. Two views folds of
			// one partition stay exact (AppliedEvents, in each commit).
			slog.WarnContext(ctx, "rollup: partition held by another invocation; folding only its staged views", "lease", lease)
			rep.Held = true
		} else {
			defer func() {
				if err := h.Store.Release(context.WithoutCancel(ctx), lease, holder); err != nil {
					slog.WarnContext(ctx, "rollup: lease not released; it expires by itself", "error", err.Error())
				}
			}()
		}
	}

	var stalled stalledCounters
	if b.Partition == 0 && !rep.Held {
		// One relay per minute, not one per partition.
		evs, err := h.Store.Stale(ctx, h.RelayAfter)
		stalled.outbox(evs, start.Add(-h.StallAfter))
		if err == nil && len(evs) > 0 {
			err = events.PublishAll(ctx, h.Publisher, evs)
		}
		if err != nil {
			rep.Errors++
			httpx.LogJobFailure(ctx, "rollup: outbox relay failed; the next minute retries", err)
		} else if len(evs) > 0 {
			rep.Relayed = len(evs)
			slog.WarnContext(ctx, "rollup: republished outbox events whose message was lost", "events", len(evs))
		}
	}

	until := start.Add(h.Period - h.Interval/2)
	if b.Once {
		until = start
	}
	// The views fold, on ticks of its own, to half its interval before the
	// minute's end: the next minute's first fold follows within about that.
	var viewsDone sync.WaitGroup
	var vrep Report
	if h.Views != nil {
		lo, hi, _ := counter.PartRange(b.Partition, b.Partitions)
		viewsUntil := start.Add(h.Period - h.ViewsInterval/2)
		if b.Once {
			viewsUntil = start
		}
		viewsDone.Go(func() { vrep = h.foldViews(ctx, viewsUntil, lo, hi) })
	}
	opts := foldstore.Pass{Partition: b.Partition, Partitions: b.Partitions, Workers: h.Workers}
	// Rollup lag: the age of the oldest delta not yet folded, as each pass
	// finds it; while passes fail, at least the time since the last pass
	// that succeeded, so that the alert fires when folding stops.
	lastListed := start
	var maxLag time.Duration
	if !rep.Held { // the holder folds the counters
		every(ctx, h.Interval, until, func() {
			started := time.Now()
			st, err := h.Store.FoldPart(ctx, opts)
			h.Metrics.RollupDuration(ctx, time.Since(started))
			rep.Ticks++
			if err != nil {
				rep.Errors++
				lag := max(time.Since(lastListed), st.Lag())
				maxLag = max(maxLag, lag)
				h.Metrics.RollupLag(ctx, lag)
				httpx.LogJobFailure(ctx, "rollup: fold failed; the next tick retries", err)
				return
			}
			h.Metrics.RollupLag(ctx, st.Lag())
			maxLag = max(maxLag, st.Lag())
			lastListed = st.Listed
			rep.Counters += st.Counters
			rep.Shards += st.Shards
			for k, n := range st.Resized {
				h.Metrics.CounterShards(ctx, n)
				rep.Resized[k] = n
				slog.InfoContext(ctx, "rollup: shard count changed", "counterKey", k, "shards", n)
			}
		})
	}
	viewsDone.Wait()
	rep.ViewFolds, rep.ViewBatches, rep.ViewsApplied = vrep.ViewFolds, vrep.ViewBatches, vrep.ViewsApplied
	rep.Errors += vrep.Errors
	if h.Staged != nil && !rep.Held {
		lo, hi, _ := counter.PartRange(b.Partition, b.Partitions)
		bs, err := h.Staged.StagedBefore(ctx, lo, hi, time.Now().Add(-h.StallAfter), maxStalledBatches)
		if err != nil {
			rep.Errors++
			httpx.LogJobFailure(ctx, "rollup: stalled views not checked; the next run checks", err)
		}
		stalled.views(bs)
	}
	rep.Stalled = stalled.log(ctx, b.Partition, b.Partitions)
	// One line per run (per partition): Terraform's log-based metric
	// rollup_lag reads lagSeconds from it (monitoring.tf), so the alert
	// exists on a fresh project before any metric was written, and its
	// absence means the rollup stopped. A failed tick's lag counts from the
	// last pass that succeeded, so a run whose folds all failed reports the
	// whole run as lag.
	// A run that found its partition held reports no lag: the holder's
	// line does, or its absence.
	if rep.Held {
		slog.InfoContext(ctx, "rollup: views folded beside the partition's holder", "partition", b.Partition, "partitions", b.Partitions,
			"viewFolds", rep.ViewFolds, "errors", rep.Errors, "viewBatches", rep.ViewBatches)
		return rep, nil
	}
	slog.InfoContext(ctx, "rollup: done", "partition", b.Partition, "partitions", b.Partitions,
		"ticks", rep.Ticks, "errors", rep.Errors, "lagSeconds", maxLag.Seconds(), "viewBatches", rep.ViewBatches)
	return rep, nil
}

// LogStalled is the message of the line that names stalled counters: their
// count ("counters"), up to maxStalledKeys of their keys ("keys"), the
// uncounted outbox events and staged batches that make them stalled, and
// the age of the oldest ("oldestSeconds"). Terraform's log-based metric
// stalled_counters counts these lines.
const LogStalled = "rollup: stalled counters"

// Bounds of the stalled check: the staged batches it reads per run, and the
// keys its line names.
const (
	maxStalledBatches = 1000
	maxStalledKeys    = 20
)

// stalledCounters gathers the counters whose changes wait uncounted.
type stalledCounters struct {
	keys        map[string]bool
	outboxN     int
	batches     int
	undecodable int
	oldest      time.Time
}

func (s *stalledCounters) add(key string, at time.Time) {
	if s.keys == nil {
		s.keys = map[string]bool{}
	}
	if key != "" {
		s.keys[key] = true
	}
	if s.oldest.IsZero() || at.Before(s.oldest) {
		s.oldest = at
	}
}

// outbox adds the outbox events created before cut: the relay republishes
// them each minute, so they are changes its copies did not get counted.
func (s *stalledCounters) outbox(evs []events.Event, cut time.Time) {
	for _, e := range evs {
		if !e.Time.Before(cut) {
			continue
		}
		s.outboxN++
		for _, d := range e.Deltas {
			s.add(d.Key, e.Time)
		}
	}
}

// views adds staged batches the folds left: a fold counts and deletes what
// it lists, so these are batches it cannot count.
func (s *stalledCounters) views(bs []views.Batch) {
	for _, b := range bs {
		s.batches++
		if b.Err != nil {
			s.undecodable++
			s.add("", b.Written)
			continue
		}
		for _, e := range b.Events {
			for _, d := range e.Deltas {
				s.add(d.Key, b.Written)
			}
		}
	}
}

// log writes the LogStalled line when anything is stalled and returns how
// many counters are.
func (s *stalledCounters) log(ctx context.Context, partition, partitions int) int {
	if s.outboxN == 0 && s.batches == 0 {
		return 0
	}
	keys := slices.Sorted(maps.Keys(s.keys))
	n := len(keys)
	if n == 0 {
		n = 1 // undecodable batches: their counters are unknown
	}
	slog.ErrorContext(ctx, LogStalled, "partition", partition, "partitions", partitions,
		"counters", n, "keys", keys[:min(len(keys), maxStalledKeys)],
		"outboxEvents", s.outboxN, "viewBatches", s.batches, "undecodableBatches", s.undecodable,
		"oldestSeconds", time.Since(s.oldest).Seconds())
	return n
}

// foldViews folds the staged views of parts [lo, hi) every ViewsInterval
// until until (at least once), and reports its folds.
func (h *handler) foldViews(ctx context.Context, until time.Time, lo, hi int) (rep Report) {
	every(ctx, h.ViewsInterval, until, func() {
		st, err := h.Views(ctx, views.FoldOptions{Lo: lo, Hi: hi})
		rep.ViewFolds++
		rep.ViewBatches += st.Batches
		rep.ViewsApplied += st.Applied
		if err != nil {
			rep.Errors++
			httpx.LogJobFailure(ctx, "rollup: views fold failed; the next fold retries (batches it counted are refused then)", err)
		} else if st.Undecodable > 0 {
			slog.ErrorContext(ctx, "rollup: staged views that cannot be decoded are left in place", "batches", st.Undecodable)
		}
	})
	return rep
}

// every runs f every interval until until (at least once).
func every(ctx context.Context, interval time.Duration, until time.Time, f func()) {
	for {
		started := time.Now()
		f()
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
