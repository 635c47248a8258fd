package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/videngage/engagement/shared/errs"
)

// Shared is a per-user limit that holds across every instance because its
// count lives in a store they share; *Bigtable is one.
type Shared interface {
	Allow(ctx context.Context, userID string) (time.Duration, error)
	AllowMany(ctx context.Context, userIDs []string) ([]time.Duration, error)
}

// DegradedCounter counts the actions whose limit was decided by the
// instance's own limit; *telemetry.Metrics is one.
type DegradedCounter interface {
	RateLimitDegraded(ctx context.Context, kind string, n int)
}

// The log lines of a degradation. LogDegraded is written when the shared
// store stops answering and then at most once per logEvery while it does
// not (an alert counts these lines); LogRecovered once it answers again.
const (
	LogDegraded  = "ratelimit: shared limit unavailable, per-instance limit in force"
	LogRecovered = "ratelimit: shared limit answers again"
)

const (
	// probeEvery is how often a degraded limiter asks the shared store
	// again: one request of the instance's a period waits up to the budget
	// for it, the others are decided at once by the per-instance limit.
	probeEvery = time.Second
	// logEvery spaces the LogDegraded lines of one limiter.
	logEvery = time.Minute
)

// Degrading is a shared per-user limit that degrades to a per-instance one
// (Local, the instance's Share of the limit) when its store does not answer
// within a budget: a write is then accepted or refused by this instance's count
// rather than refused with 503 for want of the shared one. It asks the
// shared store again every probeEvery and uses it as soon as it answers.
// Only unavailability degrades: a request whose caller is gone still fails,
// and an error that is no backend failure stays one.
type Degrading struct {
	shared  Shared
	local   *Local
	kind    string
	budget  time.Duration
	metrics DegradedCounter
	now     func() time.Time

	mu        sync.Mutex
	downSince time.Time // zero while the shared store answers
	skipUntil time.Time // until then, the per-instance limit without asking
	decided   int       // by the per-instance limit since the last log line
	loggedAt  time.Time
}

// NewDegrading limits kind to perMinute per user through shared, falling
// back to this instance's Share of it, of instances instances (the
// function's maximum, config's FUNCTION_MAX_INSTANCES), when shared has not
// answered within budget (not positive: within the caller's deadline). m
// may be nil.
func NewDegrading(shared Shared, kind string, perMinute, instances int, budget time.Duration, m DegradedCounter) *Degrading {
	return &Degrading{shared: shared, local: newLocal(Share(perMinute, instances)), kind: kind, budget: budget, metrics: m, now: time.Now}
}

// Allow counts one action of the user and reports how long to wait when it
// is over the limit (zero: admitted).
func (d *Degrading) Allow(ctx context.Context, userID string) (time.Duration, error) {
	if d.ask() {
		sctx, cancel := d.withBudget(ctx)
		wait, err := d.shared.Allow(sctx, userID)
		cancel()
		if err = d.answered(ctx, err); err == nil {
			return wait, nil
		}
		if !errors.Is(err, errDegrade) {
			return 0, err
		}
	}
	d.decidedLocally(ctx, 1)
	return d.local.Allow(userID, d.now()), nil
}

// AllowMany counts one action of each of userIDs and reports for each how
// long to wait, zero when admitted.
func (d *Degrading) AllowMany(ctx context.Context, userIDs []string) ([]time.Duration, error) {
	if len(userIDs) == 0 {
		return []time.Duration{}, nil
	}
	if d.ask() {
		sctx, cancel := d.withBudget(ctx)
		waits, err := d.shared.AllowMany(sctx, userIDs)
		cancel()
		if err = d.answered(ctx, err); err == nil {
			return waits, nil
		}
		if !errors.Is(err, errDegrade) {
			return nil, err
		}
	}
	d.decidedLocally(ctx, len(userIDs))
	now := d.now()
	waits := make([]time.Duration, len(userIDs))
	for i, u := range userIDs {
		waits[i] = d.local.Allow(u, now)
	}
	return waits, nil
}

// withBudget bounds a call of the shared store by the budget (none when it
// is not positive: the caller's deadline only).
func (d *Degrading) withBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	if d.budget <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d.budget)
}

// errDegrade says the shared store did not answer: decide locally.
var errDegrade = errors.New("ratelimit: degrade")

// ask reports whether to ask the shared store: always while it answers;
// while it does not, one caller every probeEvery.
func (d *Degrading) ask() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.downSince.IsZero() {
		return true
	}
	now := d.now()
	if now.Before(d.skipUntil) {
		return false
	}
	d.skipUntil = now.Add(probeEvery)
	return true
}

// answered takes the shared store's answer: nil when it answered, errDegrade
// when it is unavailable and the caller still waits, err otherwise.
func (d *Degrading) answered(ctx context.Context, err error) error {
	if err == nil {
		d.recovered(ctx)
		return nil
	}
	if ctx.Err() != nil || !errs.Transient(err) {
		return err
	}
	d.mu.Lock()
	now := d.now()
	first := d.downSince.IsZero()
	if first {
		d.downSince, d.loggedAt = now, now
	}
	d.skipUntil = now.Add(probeEvery)
	d.mu.Unlock()
	if first {
		slog.WarnContext(ctx, LogDegraded, "kind", d.kind, "budget", d.budget.String(), "error", err.Error())
	}
	return errDegrade
}

// recovered ends a degradation, if one was under way, with a log line.
func (d *Degrading) recovered(ctx context.Context) {
	d.mu.Lock()
	since, n := d.downSince, d.decided
	if since.IsZero() {
		d.mu.Unlock()
		return
	}
	d.downSince, d.skipUntil, d.decided = time.Time{}, time.Time{}, 0
	now := d.now()
	d.mu.Unlock()
	slog.InfoContext(ctx, LogRecovered, "kind", d.kind, "degradedSeconds", now.Sub(since).Seconds(), "decidedLocally", n)
}

// decidedLocally counts n actions decided by the per-instance limit, and
// logs the degradation again when logEvery has passed since its last line.
func (d *Degrading) decidedLocally(ctx context.Context, n int) {
	if d.metrics != nil {
		d.metrics.RateLimitDegraded(ctx, d.kind, n)
	}
	d.mu.Lock()
	d.decided += n
	now := d.now()
	if d.downSince.IsZero() || now.Sub(d.loggedAt) < logEvery {
		d.mu.Unlock()
		return
	}
	since, decided := d.downSince, d.decided
	d.loggedAt, d.decided = now, 0
	d.mu.Unlock()
	slog.WarnContext(ctx, LogDegraded, "kind", d.kind, "budget", d.budget.String(),
		"degradedSeconds", now.Sub(since).Seconds(), "decidedLocally", decided)
}
