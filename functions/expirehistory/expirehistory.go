// Package expirehistoryfn is the ExpireHistory function
// (POST /internal/expire-history, called by Cloud Scheduler each hour with
// OIDC): it removes the watch-history entries that are past their user's
// auto-delete horizon (3, 18 or 36 months), so that what a user's setting
// hides is also gone.
//
// A run walks the users whose auto-delete is on (their settings documents,
// in document order, a page at a time) from where the last run stopped,
// and removes each user's entries older than the horizon. It takes at most
// {"users": n} users (default DefaultUsers) and pages for at most Budget,
// then records where it stopped,
// as it does after every page: a run that dies resumes at its last page
// (redoing a page removes nothing twice), and a pass that reaches the last
// user starts over on the next run. The cost of a run is bounded by n users:
// one settings document read per user, one Bigtable scan per user (that
// returns no row when nothing expired) and two deletions per expired entry.
package expirehistoryfn

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
)

func init() {
	host.RegisterHTTP("ExpireHistory", host.NeedBigtable|host.NeedFirestore,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			return New(Deps{
				Users: historystore.NewSettings(c.Firestore),
				Store: historystore.New(c.Bigtable),
			}), nil
		})
}

// Users lists the users whose auto-delete is on and keeps the job's cursor
// (historystore.Settings).
type Users interface {
	AutoDeleting(ctx context.Context, after string, limit int) ([]historystore.UserSettings, string, error)
	Cursor(ctx context.Context, name string) (string, error)
	SetCursor(ctx context.Context, name, cursor string) error
}

// Store removes a user's entries before a horizon (historystore.Store).
type Store interface {
	Expire(ctx context.Context, userID string, horizon time.Time) (int, error)
}

const (
	// DefaultUsers is how many users a run takes when the body does not say.
	DefaultUsers = 5000
	// maxUsers bounds {"users"}.
	maxUsers = 100_000
	// cursorName names the job's cursor.
	cursorName = "expire-history"
)

// Deps are the handler's collaborators.
type Deps struct {
	Users Users
	Store Store
	// Page is how many users one settings query lists (default 100).
	Page int
	// Workers is how many users' entries are removed at once (default 8).
	Workers int
	// Budget is how long a run takes new pages (default 90 s; the
	// scheduled functions' timeout is 120 s): the rest waits for the next
	// run at the cursor.
	Budget time.Duration
	Now    func() time.Time
}

type handler struct{ Deps }

// DefaultBudget is a run's budget when Deps leaves Budget unset, as deployed.
const DefaultBudget = 90 * time.Second

// RunTimeout bounds a run of budget: its last page gets a margin past it.
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
	if d.Now == nil {
		d.Now = time.Now
	}
	h := &handler{d}
	// A run outlives the public functions' request deadline; its last page
	// gets a margin past the budget, which still ends before the function's
	// timeout (120 s for the default 90 s budget).
	return httpx.Job("POST /internal/expire-history", RunTimeout(h.Budget),
		func(bool) body { return body{Users: DefaultUsers} }, h.post)
}

type body struct {
	Users int `json:"users"`
}

// Report is the answer: what the run did.
type Report struct {
	// Users is how many users with auto-delete on the run looked at.
	Users int `json:"users"`
	// Entries is how many history entries it removed.
	Entries int `json:"entries"`
	// PassDone says the run reached the last user: the next one starts over.
	PassDone bool `json:"passDone"`
}

func (h *handler) post(ctx context.Context, b body) (Report, error) {
	if b.Users < 1 || b.Users > maxUsers {
		return Report{}, httpx.InvalidArgument("users must be between 1 and %d", maxUsers)
	}
	started := time.Now()
	rep, err := h.run(ctx, b.Users, started.Add(h.Budget))
	if err != nil {
		httpx.LogJobFailure(ctx, "expire-history: run stopped; the next one resumes at its last page", err,
			"users", rep.Users, "entries", rep.Entries)
		return Report{}, err
	}
	slog.InfoContext(ctx, "expire-history: done", "users", rep.Users, "entries", rep.Entries,
		"passDone", rep.PassDone, "duration", time.Since(started).String())
	return rep, nil
}

// run takes up to n users from the stored cursor on, removing each one's
// entries past their horizon, and records the cursor after every page. It
// starts no page after until.
func (h *handler) run(ctx context.Context, n int, until time.Time) (Report, error) {
	var rep Report
	cursor, err := h.Users.Cursor(ctx, cursorName)
	if err != nil {
		return rep, err
	}
	now := h.Now()
	for rep.Users < n && time.Now().Before(until) {
		limit := min(h.Page, n-rep.Users)
		users, next, err := h.Users.AutoDeleting(ctx, cursor, limit)
		if err != nil {
			return rep, err
		}
		removed, err := h.expire(ctx, users, now)
		rep.Entries += removed
		if err != nil {
			return rep, err
		}
		rep.Users += len(users)
		if err := h.Users.SetCursor(ctx, cursorName, next); err != nil {
			return rep, err
		}
		if next == "" {
			rep.PassDone = true
			return rep, nil
		}
		cursor = next
	}
	return rep, nil
}

// expire removes the entries past each user's horizon, Workers users at a
// time, and returns how many it removed.
func (h *handler) expire(ctx context.Context, users []historystore.UserSettings, now time.Time) (int, error) {
	var (
		removed atomic.Int64
		g       errgroup.Group
	)
	g.SetLimit(h.Workers)
	for _, u := range users {
		horizon := u.Settings.Horizon(now)
		if horizon.IsZero() {
			continue
		}
		g.Go(func() error {
			n, err := h.Store.Expire(ctx, u.UserID, horizon)
			removed.Add(int64(n))
			return err
		})
	}
	err := g.Wait()
	return int(removed.Load()), err
}
