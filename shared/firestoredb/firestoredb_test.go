package firestoredb

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/emulators/emulatortest"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/httpx"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// newClient is a Firestore client of a fresh project of the emulator, built
// as platform.New builds it (platform imports this package, so tests here
// cannot use it).
func newClient(t *testing.T) *firestore.Client {
	t.Helper()
	cfg := emulatortest.New(t)
	c, err := firestore.NewClientWithDatabase(context.Background(), cfg.Project, cfg.Firestore.Database)
	if err != nil {
		t.Fatalf("firestore.NewClientWithDatabase: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var trickyUserIDs = []string{"alice", "a/b", "a", "a#b", "__x__", "__.*__", ".", "..", "日本", "\x00", strings.Repeat("x", 128)}

func TestDocID(t *testing.T) {
	seen := map[string]string{}
	for _, u := range trickyUserIDs {
		id := DocID(u)
		// Firestore document ids: no '/', not "." or "..", not __.*__,
		// at most 1,500 bytes.
		if strings.Contains(id, "/") || id == "." || id == ".." || (strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__")) || len(id) > 1500 || id == "" {
			t.Errorf("DocID(%q) = %q is not a valid document id", u, id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("DocID(%q) = DocID(%q) = %q", u, prev, id)
		}
		seen[id] = u
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	s := NewSettings(newClient(t))
	ctx := t.Context()

	for _, u := range trickyUserIDs {
		got, err := s.Get(ctx, u)
		if err != nil {
			t.Fatalf("Get(%q): %v", u, err)
		}
		if diff := cmp.Diff(history.Settings{}, got); diff != "" {
			t.Errorf("Get(%q) of a user who never set any (-want +got):\n%s", u, diff)
		}
	}

	// Every user gets its own settings, and Put replaces them.
	for i, u := range trickyUserIDs {
		v := history.Settings{Paused: i%2 == 0, AutoDeleteMonths: []int{0, 3, 18, 36}[i%4]}
		if err := s.Put(ctx, u, v); err != nil {
			t.Fatalf("Put(%q): %v", u, err)
		}
	}
	for i, u := range trickyUserIDs {
		want := history.Settings{Paused: i%2 == 0, AutoDeleteMonths: []int{0, 3, 18, 36}[i%4]}
		got, err := s.Get(ctx, u)
		if err != nil {
			t.Fatalf("Get(%q): %v", u, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get(%q) after Put (-want +got):\n%s", u, diff)
		}
	}
	if err := s.Put(ctx, "alice", history.Settings{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "alice"); err != nil || got != (history.Settings{}) {
		t.Errorf("Get after Put of the defaults = %+v, %v", got, err)
	}
}

func TestSettingsBackendDown(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	s := NewSettings(c)
	c.Close()
	if _, err := s.Get(t.Context(), "alice"); !errors.Is(err, httpx.ErrBackendUnavailable) {
		t.Errorf("Get on a closed client: %v; want ErrBackendUnavailable", err)
	}
	if err := s.Put(t.Context(), "alice", history.Settings{Paused: true}); !errors.Is(err, httpx.ErrBackendUnavailable) {
		t.Errorf("Put on a closed client: %v; want ErrBackendUnavailable", err)
	}
}

// clock is a settable time source shared by several limiters.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func limiterAt(c *firestore.Client, kind string, limit int, clk *clock) *RateLimiter {
	l := NewRateLimiter(c, kind, limit)
	l.now = clk.now
	return l
}

func allow(t *testing.T, l *RateLimiter, user string) time.Duration {
	t.Helper()
	wait, err := l.Allow(t.Context(), user)
	if err != nil {
		t.Fatalf("Allow(%q): %v", user, err)
	}
	return wait
}

func TestRateLimiterAcrossInstances(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	minute := time.Now().UTC().Truncate(time.Minute)
	clk := &clock{t: minute.Add(20 * time.Second)}
	const limit = 5
	// Two function instances: two limiters, one Firestore.
	a, b := limiterAt(c, "history", limit, clk), limiterAt(c, "history", limit, clk)

	for i := range limit {
		l := []*RateLimiter{a, b}[i%2]
		if wait := allow(t, l, "alice"); wait != 0 {
			t.Fatalf("action %d of %d refused (wait %v)", i+1, limit, wait)
		}
	}
	for _, l := range []*RateLimiter{a, b, a} {
		wait := allow(t, l, "alice")
		if wait != 40*time.Second {
			t.Errorf("action over the limit: wait %v, want 40s (the rest of the minute)", wait)
		}
	}

	// Other users and other kinds have their own counts.
	if wait := allow(t, a, "alice#"); wait != 0 {
		t.Errorf("another user refused: wait %v", wait)
	}
	if wait := allow(t, limiterAt(c, "reactions", limit, clk), "alice"); wait != 0 {
		t.Errorf("another kind refused: wait %v", wait)
	}

	// The wait shrinks through the minute and never exceeds it.
	for _, at := range []time.Duration{0, time.Nanosecond, 30 * time.Second, 59*time.Second + 999*time.Millisecond} {
		clk.set(minute.Add(at))
		wait := allow(t, b, "alice")
		if want := time.Minute - at; wait != want || wait <= 0 || wait > time.Minute {
			t.Errorf("%v into the minute: wait %v, want %v", at, wait, want)
		}
	}

	// The next minute admits again, up to the limit.
	clk.set(minute.Add(time.Minute))
	for i := range limit {
		if wait := allow(t, []*RateLimiter{b, a}[i%2], "alice"); wait != 0 {
			t.Fatalf("next minute: action %d refused (wait %v)", i+1, wait)
		}
	}
	if wait := allow(t, a, "alice"); wait != time.Minute {
		t.Errorf("next minute over the limit: wait %v, want 1m", wait)
	}

	// The window carries its expiry for Firestore's TTL policy.
	snap, err := c.Collection(RateLimitCollection).Doc("history-" + DocID("alice") + "-" + strconv.FormatInt(minute.Add(time.Minute).Unix(), 10)).Get(t.Context())
	if err != nil {
		t.Fatalf("window document: %v", err)
	}
	var w window
	if err := snap.DataTo(&w); err != nil {
		t.Fatal(err)
	}
	if w.Count != limit || !w.ExpireAt.Equal(minute.Add(3*time.Minute)) {
		t.Errorf("window %+v, want count %d and expireAt %v", w, limit, minute.Add(3*time.Minute))
	}
}

func TestRateLimiterConcurrent(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	clk := &clock{t: time.Now().UTC().Truncate(time.Minute).Add(10 * time.Second)}
	// Few: the emulator resolves each collision of two transactions on one
	// document by a lock wait of about two seconds, and gives up (Aborted)
	// past about ten at once.
	const (
		limit    = 2
		attempts = 3
	)
	ls := []*RateLimiter{limiterAt(c, "history", limit, clk), limiterAt(c, "history", limit, clk)}
	var (
		admitted, refused atomic.Int64
		wg                sync.WaitGroup
		errs              = make(chan error, attempts)
	)
	for i := range attempts {
		wg.Go(func() {
			wait, err := ls[i%2].Allow(context.Background(), "bob")
			switch {
			case err != nil:
				errs <- err
			case wait == 0:
				admitted.Add(1)
			case wait > 0 && wait <= time.Minute:
				refused.Add(1)
			default:
				errs <- errors.New("wait out of range: " + wait.String())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Allow: %v", err)
	}
	if admitted.Load() != limit || refused.Load() != attempts-limit {
		t.Errorf("%d concurrent actions through two limiters: %d admitted, %d refused; want %d and %d",
			attempts, admitted.Load(), refused.Load(), limit, attempts-limit)
	}
}

func TestRateLimiterNilAdmitsEverything(t *testing.T) {
	var l *RateLimiter
	for range 3 {
		if wait, err := l.Allow(t.Context(), "alice"); wait != 0 || err != nil {
			t.Fatalf("nil limiter: %v, %v", wait, err)
		}
	}
}

func TestRateLimiterBackendDown(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	l := NewRateLimiter(c, "history", 5)
	c.Close()
	if _, err := l.Allow(t.Context(), "alice"); !errors.Is(err, httpx.ErrBackendUnavailable) {
		t.Errorf("Allow on a closed client: %v; want ErrBackendUnavailable", err)
	}
}
