package ratelimit

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/errs"
)

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

func limiterAt(c *bigtable.Client, kind string, limit int, clk *clock) *Bigtable {
	l := NewBigtable(c, kind, limit)
	l.now = clk.now
	return l
}

func allow(t *testing.T, l *Bigtable, user string) time.Duration {
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
	// Two function instances: two limiters, one table.
	a, b := limiterAt(c, "history", limit, clk), limiterAt(c, "history", limit, clk)

	for i := range limit {
		l := []*Bigtable{a, b}[i%2]
		if wait := allow(t, l, "alice"); wait != 0 {
			t.Fatalf("action %d of %d refused (wait %v)", i+1, limit, wait)
		}
	}
	for _, l := range []*Bigtable{a, b, a} {
		if wait := allow(t, l, "alice"); wait != 40*time.Second {
			t.Errorf("action over the limit: wait %v, want 40s (the rest of the minute)", wait)
		}
	}

	// Other users (one whose prefix is alice's) and other kinds have their
	// own counts.
	for _, user := range []string{"alice#", "alic", "alice1"} {
		if wait := allow(t, a, user); wait != 0 {
			t.Errorf("user %q refused: wait %v", user, wait)
		}
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
		if wait := allow(t, []*Bigtable{b, a}[i%2], "alice"); wait != 0 {
			t.Fatalf("next minute: action %d refused (wait %v)", i+1, wait)
		}
	}
	if wait := allow(t, a, "alice"); wait != time.Minute {
		t.Errorf("next minute over the limit: wait %v, want 1m", wait)
	}

	// One row per kind, user and minute, whose newest cell is the count of
	// actions (refused ones too) in that minute.
	row, err := c.Open(Table).ReadRow(t.Context(), rateLimitKey("history", "alice", minute.Add(time.Minute)), bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		t.Fatal(err)
	}
	if cells := row[rateLimitFamily]; len(cells) != 1 || len(cells[0].Value) != 8 || binary.BigEndian.Uint64(cells[0].Value) != limit+1 {
		t.Errorf("window row %v, want one count cell of %d", row, limit+1)
	}
}

// TestRateLimiterConcurrent sends many concurrent actions of one user through
// two limiters: exactly the limit is admitted, and none fails or waits on
// another (increments do not contend as transactions do).
func TestRateLimiterConcurrent(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	clk := &clock{t: time.Now().UTC().Truncate(time.Minute).Add(10 * time.Second)}
	const (
		limit    = 20
		attempts = 64
	)
	ls := []*Bigtable{limiterAt(c, "history", limit, clk), limiterAt(c, "history", limit, clk)}
	var (
		admitted, refused atomic.Int64
		wg                sync.WaitGroup
		errs              = make(chan error, attempts)
	)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for i := range attempts {
		wg.Go(func() {
			wait, err := ls[i%2].Allow(ctx, "bob")
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
	var l *Bigtable
	for range 3 {
		if wait, err := l.Allow(t.Context(), "alice"); wait != 0 || err != nil {
			t.Fatalf("nil limiter: %v, %v", wait, err)
		}
	}
}

func TestRateLimiterBackendDown(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	l := NewBigtable(c, "history", 5)
	c.Close()
	if _, err := l.Allow(t.Context(), "alice"); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("Allow on a closed client: %v; want ErrBackendUnavailable", err)
	}
}

func allowMany(t *testing.T, l *Bigtable, users ...string) []time.Duration {
	t.Helper()
	waits, err := l.AllowMany(t.Context(), users)
	if err != nil {
		t.Fatalf("AllowMany(%q): %v", users, err)
	}
	if len(waits) != len(users) {
		t.Fatalf("AllowMany(%q): %d waits", users, len(waits))
	}
	return waits
}

// TestAllowManyAcrossInstances: batches through two limiters share each
// user's window; a user's actions in one batch count one each; the count
// cell Allow increments counts too.
func TestAllowManyAcrossInstances(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	minute := time.Now().UTC().Truncate(time.Minute)
	clk := &clock{t: minute.Add(15 * time.Second)}
	const limit = 5
	a, b := limiterAt(c, "reactions", limit, clk), limiterAt(c, "reactions", limit, clk)

	// alice: 2 actions in one batch, 2 in another instance's batch, 1 by Allow.
	if w := allowMany(t, a, "alice", "bob", "alice"); w[0] != 0 || w[1] != 0 || w[2] != 0 {
		t.Fatalf("first batch: waits %v, want all admitted", w)
	}
	if w := allowMany(t, b, "alice", "carol", "alice"); w[0] != 0 || w[1] != 0 || w[2] != 0 {
		t.Fatalf("second batch: waits %v, want all admitted", w)
	}
	if w := allow(t, a, "alice"); w != 0 {
		t.Fatalf("fifth action (Allow) refused: wait %v", w)
	}
	// The sixth is over the limit, in a batch beside users under it.
	if w := allowMany(t, b, "bob", "alice", "dave"); w[0] != 0 || w[1] != 45*time.Second || w[2] != 0 {
		t.Errorf("batch with alice over the limit: waits %v, want [0 45s 0]", w)
	}
	// Other kinds and the next minute have their own windows.
	if w := allowMany(t, limiterAt(c, "history", limit, clk), "alice"); w[0] != 0 {
		t.Errorf("another kind refused: wait %v", w[0])
	}
	clk.set(minute.Add(time.Minute))
	if w := allowMany(t, a, "alice", "alice", "alice", "alice", "alice"); w[0] != 0 || w[4] != 0 {
		t.Errorf("next minute, %d actions in one batch: waits %v, want all admitted", limit, w)
	}
	if w := allowMany(t, b, "alice"); w[0] != time.Minute {
		t.Errorf("next minute over the limit: wait %v, want 1m", w[0])
	}
	// A batch over the limit on its own is refused whole.
	if w := allowMany(t, a, "erin", "erin", "erin", "erin", "erin", "erin"); w[0] != time.Minute || w[5] != time.Minute {
		t.Errorf("one batch of %d actions of one user: waits %v, want all refused", limit+1, w)
	}
	if w := allowMany(t, a); len(w) != 0 {
		t.Errorf("empty batch: %v", w)
	}
}

// TestAllowManyConcurrent: concurrent batches of one user through two
// limiters admit no more than the limit (fewer when many are written before
// any is read: each reads a count that includes every action written before
// its read), and other users in the same batches are not held back.
func TestAllowManyConcurrent(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	clk := &clock{t: time.Now().UTC().Truncate(time.Minute).Add(10 * time.Second)}
	const (
		limit    = 20
		attempts = 64
	)
	ls := []*Bigtable{limiterAt(c, "reactions", limit, clk), limiterAt(c, "reactions", limit, clk)}
	var (
		admitted atomic.Int64
		wg       sync.WaitGroup
		errs     = make(chan error, attempts)
	)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range attempts {
		wg.Go(func() {
			waits, err := ls[i%2].AllowMany(ctx, []string{"bob", "someone-" + strconv.Itoa(i)})
			switch {
			case err != nil:
				errs <- err
			case waits[1] != 0:
				errs <- errors.New("a user's first action refused")
			case waits[0] == 0:
				admitted.Add(1)
			case waits[0] > time.Minute:
				errs <- errors.New("wait out of range: " + waits[0].String())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("AllowMany: %v", err)
	}
	if admitted.Load() > limit {
		t.Errorf("%d concurrent actions through two limiters: %d admitted; want at most %d",
			attempts, admitted.Load(), limit)
	}
}

func TestAllowManyBackendDown(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	l := NewBigtable(c, "reactions", 5)
	c.Close()
	if _, err := l.AllowMany(t.Context(), []string{"alice"}); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("AllowMany on a closed client: %v; want ErrBackendUnavailable", err)
	}
}
