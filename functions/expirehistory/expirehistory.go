// Package expirehistoryfn is the ExpireHistory function
// (POST /internal/expire-history, called by Cloud Scheduler each minute with
// OIDC): it removes the watch-history entries that are past their user's
// auto-delete horizon (3, 18 or 36 months), so that what a user's setting
// hides is also gone.
//
// The users whose auto-delete is on are cut into partitions, ranges of the
// expiry part their settings document holds (historystore.ExpiryPart); each
// partition is swept in passes, a page of users at a time, from a cursor of
// its own (historyJobs/expire-history-<partitions>-<i>), and starts a pass
// at most once every Every. An invocation works the partitions that are
// neither resting nor held by another invocation, several at once, each
// under its lease (JobLeases, as the reconciliation's slices), until they
// are done or its budget is spent; invocations that overlap share the
// partitions out. Every page's cursor is stored after its users are swept:
// an invocation killed anywhere resumes at its partitions' last pages
// (redoing a page removes nothing twice).
//
// Settings documents written before they held an expiry part are in no
// partition: a walk in document order (the cursor historyJobs/expire-history)
// stamps them with their part and sweeps them, once, and is then done.
package expirehistoryfn

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/spannerdb"
)

func init() {
	host.RegisterHTTP("ExpireHistory", host.NeedBigtable|host.NeedFirestore|host.NeedSpanner,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			return New(Deps{
				Users:  historystore.NewSettings(c.Firestore),
				Store:  historystore.New(c.Bigtable),
				Leases: leasestore.New(spannerdb.Wrap(c.Spanner, c.Config), nil),
			}), nil
		})
}

// Users lists the users whose auto-delete is on and keeps the job's cursors
// (historystore.Settings).
type Users interface {
	AutoDeletingIn(ctx context.Context, lo, hi int, after string, limit int) ([]historystore.UserSettings, string, error)
	AutoDeleting(ctx context.Context, after string, limit int) ([]historystore.UserSettings, string, error)
	StampExpiryPart(ctx context.Context, userID string) (bool, error)
	Cursors(ctx context.Context, names []string) ([]historystore.JobCursor, error)
	Cursor(ctx context.Context, name string) (historystore.JobCursor, error)
	SetCursor(ctx context.Context, name string, c historystore.JobCursor) error
}

// Store removes a user's entries before a horizon (historystore.Store).
type Store interface {
	Expire(ctx context.Context, userID string, horizon time.Time) (int, error)
}

// Leases keep two invocations off one partition at once (the scheduled
// jobs' leases, *leasestore.Store).
type Leases interface {
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, name, holder string) error
}

const (
	// DefaultPartitions is how many partitions the users are cut into when
	// the body does not say: enough for 100,000,000 auto-deleting users
	// (docs/design/history.md, "Auto-delete removes").
	DefaultPartitions = 128
	// DefaultParallel is how many partitions an invocation works at once
	// when the body does not say.
	DefaultParallel = 16
	// DefaultEvery is how often a partition starts a pass at most: an
	// entry goes at most a pass's length plus this after its horizon.
	DefaultEvery = 12 * time.Hour
	// DefaultBudget is how long an invocation takes new pages when Deps
	// leaves Budget unset, as deployed.
	DefaultBudget = 8 * time.Minute
	// maxParallel bounds {"parallel"}.
	maxParallel = 256
	// legacyName names the walk over the documents without an expiry part:
	// the cursor of the job before it was partitioned, kept.
	legacyName = "expire-history"
	// leaseTTL is how long a partition stays held after its last page.
	leaseTTL = 2 * time.Minute
)

// PartitionName is the cursor's name (and the lease's) of partition i of n.
func PartitionName(i, n int) string { return fmt.Sprintf("expire-history-%d-%d", n, i) }

// Deps are the handler's collaborators.
type Deps struct {
	Users  Users
	Store  Store
	Leases Leases
	// Page is how many users one settings query lists (default 100).
	Page int
	// Workers is how many users' entries a partition removes at once
	// (default 8).
	Workers int
	// Budget is how long an invocation takes new pages (default
	// DefaultBudget): the rest waits for the next invocation at the
	// partitions' cursors.
	Budget time.Duration
	// Every is how often a partition starts a pass at most (default
	// DefaultEvery).
	Every time.Duration
	Now   func() time.Time
}

type handler struct{ Deps }

// RunTimeout bounds a run of budget: its last pages get a margin past it.
func RunTimeout(budget time.Duration) time.Duration { return budget + budget/6 }

// New builds the ExpireHistory handler.
func New(d Deps) http.Handler {
	if d.Page <= 0 {
		d.Page = 100
	}
	if d.Workers <= 0 {
		d.Workers = 8
	}
	if d.Budget <= 0 {
		d.Budget = DefaultBudget
	}
	if d.Every <= 0 {
		d.Every = DefaultEvery
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	h := &handler{d}
	// A run outlives the public functions' request deadline; its last page
	// gets a margin past the budget, which still ends before the function's
	// timeout.
	return httpx.Job("POST /internal/expire-history", RunTimeout(h.Budget),
		func(bool) body { return body{Partitions: DefaultPartitions, Parallel: DefaultParallel} }, h.post)
}

type body struct {
	Partitions int `json:"partitions"`
	Parallel   int `json:"parallel"`
}

// Report is the answer: what the run did.
type Report struct {
	// Partitions counts the partitions (and the walk of unstamped
	// documents) the run worked; Held those another invocation held;
	// Resting those whose last pass began less than Every ago.
	Partitions int `json:"partitions"`
	Held       int `json:"held"`
	Resting    int `json:"resting"`
	// Passes counts the passes the run finished.
	Passes int `json:"passes"`
	// Users is how many users with auto-delete on the run looked at.
	Users int `json:"users"`
	// Entries is how many history entries it removed.
	Entries int `json:"entries"`
	// Stamped counts the settings documents it gave their expiry part.
	Stamped int `json:"stamped"`
}

func (r *Report) add(o Report) {
	r.Partitions += o.Partitions
	r.Held += o.Held
	r.Resting += o.Resting
	r.Passes += o.Passes
	r.Users += o.Users
	r.Entries += o.Entries
	r.Stamped += o.Stamped
}

func (h *handler) post(ctx context.Context, b body) (Report, error) {
	if b.Partitions < 1 || b.Partitions > counter.Parts {
		return Report{}, httpx.InvalidField(errs.InvalidValue, "partitions", "partitions must be between 1 and %d", counter.Parts)
	}
	if b.Parallel < 1 || b.Parallel > maxParallel {
		return Report{}, httpx.InvalidField(errs.InvalidValue, "parallel", "parallel must be between 1 and %d", maxParallel)
	}
	started := time.Now()
	rep, err := h.run(ctx, b, started.Add(h.Budget))
	if err != nil {
		httpx.LogJobFailure(ctx, "expire-history: run stopped; the next one resumes at its partitions' last pages", err,
			"partitions", rep.Partitions, "users", rep.Users, "entries", rep.Entries)
		return Report{}, err
	}
	slog.InfoContext(ctx, "expire-history: done", "partitions", rep.Partitions, "held", rep.Held, "resting", rep.Resting,
		"passes", rep.Passes, "users", rep.Users, "entries", rep.Entries, "stamped", rep.Stamped,
		"duration", time.Since(started).String())
	return rep, nil
}

// piece is one sweep an invocation may take: a partition, or the walk of
// the documents without an expiry part (legacy).
type piece struct {
	name   string
	lo, hi int
	legacy bool
}

// run works the pieces that are due, b.Parallel at a time in a random
// order (invocations started together spread over them), each under its
// lease. A piece that fails does not stop the others; the first error is
// returned once they end.
func (h *handler) run(ctx context.Context, b body, until time.Time) (Report, error) {
	var rep Report
	pieces := []piece{{name: legacyName, legacy: true}}
	for i := range b.Partitions {
		lo, hi, err := counter.PartRange(i, b.Partitions)
		if err != nil {
			return rep, httpx.InvalidField(errs.InvalidValue, "partitions", "%v", err)
		}
		pieces = append(pieces, piece{name: PartitionName(i, b.Partitions), lo: lo, hi: hi})
	}
	names := make([]string, len(pieces))
	for i, p := range pieces {
		names[i] = p.name
	}
	// One read of every cursor leaves the resting pieces untouched: no
	// lease is taken for them.
	curs, err := h.Users.Cursors(ctx, names)
	if err != nil {
		return rep, err
	}
	now := h.Now()
	var due []piece
	for i, p := range pieces {
		if h.resting(p, curs[i], now) {
			if !p.legacy {
				rep.Resting++
			}
			continue
		}
		due = append(due, p)
	}
	rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	holder := leasestore.NewHolder()
	var (
		mu sync.Mutex
		g  errgroup.Group
	)
	g.SetLimit(b.Parallel)
	for _, p := range due {
		g.Go(func() error {
			if !time.Now().Before(until) || ctx.Err() != nil {
				return nil
			}
			part, err := h.work(ctx, p, holder, until)
			mu.Lock()
			rep.add(part)
			mu.Unlock()
			return err
		})
	}
	err = g.Wait()
	return rep, err
}

// resting says the piece has nothing to do now: the walk of unstamped
// documents once it finished a pass it began, a partition whose last pass
// ended and began less than Every ago.
func (h *handler) resting(p piece, c historystore.JobCursor, now time.Time) bool {
	if p.legacy {
		return !c.PassEnded.IsZero()
	}
	return c.Cursor == "" && !c.PassStarted.IsZero() && now.Sub(c.PassStarted) < h.Every
}

// work sweeps the piece under its lease from its cursor, a page at a time,
// until its pass ends or until; a piece another invocation holds is left.
func (h *handler) work(ctx context.Context, p piece, holder string, until time.Time) (rep Report, err error) {
	got, err := h.Leases.Lease(ctx, p.name, holder, leaseTTL)
	if err != nil || !got {
		rep.Held = 1
		return rep, err
	}
	defer func() {
		if err := h.Leases.Release(context.WithoutCancel(ctx), p.name, holder); err != nil {
			slog.WarnContext(ctx, "expire-history: lease not released; it expires by itself", "lease", p.name, "error", err.Error())
		}
	}()
	rep.Partitions = 1
	// Read again under the lease: the cursor may have moved since the
	// invocation listed them.
	c, err := h.Users.Cursor(ctx, p.name)
	if err != nil {
		return rep, err
	}
	now := h.Now()
	if h.resting(p, c, now) {
		return rep, nil
	}
	if c.Cursor == "" || p.legacy && c.PassStarted.IsZero() {
		// A new pass. The walk of unstamped documents starts over once
		// under this code, whatever cursor an older one left.
		c = historystore.JobCursor{PassStarted: now, PassEnded: c.PassEnded}
	}
	renewed := time.Now()
	for time.Now().Before(until) {
		var (
			users []historystore.UserSettings
			next  string
		)
		if p.legacy {
			users, next, err = h.Users.AutoDeleting(ctx, c.Cursor, h.Page)
		} else {
			users, next, err = h.Users.AutoDeletingIn(ctx, p.lo, p.hi, c.Cursor, h.Page)
		}
		if err != nil {
			return rep, err
		}
		removed, stamped, err := h.expire(ctx, users, now, p.legacy)
		rep.Entries += removed
		rep.Stamped += stamped
		if err != nil {
			return rep, err
		}
		rep.Users += len(users)
		c.Cursor = next
		if next == "" {
			c.PassEnded = h.Now()
		}
		if err := h.Users.SetCursor(ctx, p.name, c); err != nil {
			return rep, err
		}
		if next == "" {
			rep.Passes++
			return rep, nil
		}
		// Renewed well before it could expire; lost (another invocation
		// took the partition over after a stall), the partition is left
		// to the new holder.
		if time.Since(renewed) > leaseTTL/4 {
			got, err := h.Leases.Lease(ctx, p.name, holder, leaseTTL)
			if err != nil || !got {
				return rep, err
			}
			renewed = time.Now()
		}
	}
	return rep, nil
}

// expire removes the entries past each user's horizon, Workers users at a
// time, stamping first the documents without an expiry part when stamp is
// set, and returns how many entries it removed and documents it stamped.
func (h *handler) expire(ctx context.Context, users []historystore.UserSettings, now time.Time, stamp bool) (int, int, error) {
	var (
		removed, stamped atomic.Int64
		g                errgroup.Group
	)
	g.SetLimit(h.Workers)
	for _, u := range users {
		horizon := u.Settings.Horizon(now)
		if horizon.IsZero() {
			continue
		}
		g.Go(func() error {
			if stamp && !u.Stamped {
				wrote, err := h.Users.StampExpiryPart(ctx, u.UserID)
				if err != nil {
					return err
				}
				if wrote {
					stamped.Add(1)
				}
			}
			n, err := h.Store.Expire(ctx, u.UserID, horizon)
			removed.Add(int64(n))
			return err
		})
	}
	err := g.Wait()
	return int(removed.Load()), int(stamped.Load()), err
}
