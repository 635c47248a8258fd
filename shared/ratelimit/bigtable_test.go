package ratelimit

import (
	"context"
	"errors"
	"fmt"
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
	t0 := time.Now().UTC().Truncate(time.Minute).Add(20 * time.Second)
	clk := &clock{t: t0}
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
		if wait := allow(t, l, "alice"); wait != time.Minute {
			t.Errorf("action over the limit: wait %v, want 1m (until the first actions are 60 s old)", wait)
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

	// The wait shrinks as the actions age, across the minute's end too:
	// the window is the last 60 seconds, not the minute.
	for _, at := range []time.Duration{time.Millisecond, 30 * time.Second, 40 * time.Second, 59*time.Second + 999*time.Millisecond} {
		clk.set(t0.Add(at))
		if wait, want := allow(t, b, "alice"), time.Minute-at; wait != want {
			t.Errorf("%v after the first actions: wait %v, want %v", at, wait, want)
		}
	}

	// 60 seconds after them the limit is free again; the newest of the
	// window sets the next wait.
	clk.set(t0.Add(time.Minute))
	for i := range limit - 2 {
		if wait := allow(t, []*Bigtable{b, a}[i%2], "alice"); wait != 0 {
			t.Fatalf("60 s later: action %d refused (wait %v)", i+1, wait)
		}
	}
	clk.set(t0.Add(time.Minute + 10*time.Second))
	for i := range 2 {
		if wait := allow(t, []*Bigtable{b, a}[i%2], "alice"); wait != 0 {
			t.Fatalf("70 s later: action %d refused (wait %v)", i+1, wait)
		}
	}
	clk.set(t0.Add(time.Minute + 30*time.Second))
	if wait := allow(t, a, "alice"); wait != 30*time.Second {
		t.Errorf("90 s later, over the limit: wait %v, want 30s (until the actions of 60 s are 60 s old)", wait)
	}

	// Only admitted actions are held: 2 × limit cells, none of the refusals.
	row, err := c.Open(Table).ReadRow(t.Context(), rateLimitKey("history", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(row[rateLimitFamily]); n != 2*limit {
		t.Errorf("alice's row holds %d cells, want %d (the admitted actions)", n, 2*limit)
	}
}

// TestBigtableHoldsOverAnyMinute sends generated request streams of one
// user through two limiters sharing a table, one action a call (Allow) or
// a few in a batch (AllowMany), and counts the admissions in every 60
// seconds: never more than the limit. A count per fixed minute admits
// nearly twice the limit across a minute's end.
func TestBigtableHoldsOverAnyMinute(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	const limit = 10
	for name, stream := range requestStreams(7, start) {
		for _, batched := range []bool{false, true} {
			clk := &clock{}
			kind := fmt.Sprintf("%s/%v", name, batched)
			ls := []*Bigtable{limiterAt(c, kind, limit, clk), limiterAt(c, kind, limit, clk)}
			var admitted []time.Time
			for i, at := range stream {
				if at.After(start.Add(3 * time.Minute)) {
					break // three minutes hold every case, and are quicker
				}
				clk.set(at)
				l := ls[i%2]
				if !batched {
					if allow(t, l, "alice") == 0 {
						admitted = append(admitted, at)
					}
					continue
				}
				users := []string{"alice", "bob", "alice"}[:1+i%3]
				for j, w := range allowMany(t, l, users...) {
					if w == 0 && users[j] == "alice" {
						admitted = append(admitted, at)
					}
				}
			}
			if most := mostInAnyMinute(admitted); most > limit {
				t.Errorf("%d a minute, a client sending %s (batched %v): %d admitted in one 60 s span", limit, name, batched, most)
			}
			if len(admitted) < 2*limit {
				t.Errorf("%d a minute, a client sending %s (batched %v): %d admitted in three minutes, want at least %d",
					limit, name, batched, len(admitted), 2*limit)
			}
		}
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
// user's window; a user's actions in one batch count one each; Allow's
// actions count too.
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
	// The sixth is over the limit, in a batch beside users under it: it
	// waits until the first five are 60 s old.
	if w := allowMany(t, b, "bob", "alice", "dave"); w[0] != 0 || w[1] != time.Minute || w[2] != 0 {
		t.Errorf("batch with alice over the limit: waits %v, want [0 1m 0]", w)
	}
	// Other kinds have their own windows.
	if w := allowMany(t, limiterAt(c, "history", limit, clk), "alice"); w[0] != 0 {
		t.Errorf("another kind refused: wait %v", w[0])
	}
	// Across the minute's end the window still holds the five.
	clk.set(minute.Add(time.Minute + 14*time.Second))
	if w := allowMany(t, a, "alice"); w[0] != time.Second {
		t.Errorf("59 s later: wait %v, want 1s", w[0])
	}
	clk.set(minute.Add(time.Minute + 15*time.Second))
	if w := allowMany(t, a, "alice", "alice", "alice", "alice", "alice"); w[0] != 0 || w[4] != 0 {
		t.Errorf("60 s later, %d actions in one batch: waits %v, want all admitted", limit, w)
	}
	if w := allowMany(t, b, "alice"); w[0] != time.Minute {
		t.Errorf("60 s later over the limit: wait %v, want 1m", w[0])
	}
	// A batch over the limit on its own is refused whole, and leaves
	// nothing behind: the user's next action is admitted.
	if w := allowMany(t, a, "erin", "erin", "erin", "erin", "erin", "erin"); w[0] == 0 || w[5] == 0 || w[0] > time.Second {
		t.Errorf("one batch of %d actions of one user: waits %v, want all refused, the next at once", limit+1, w)
	}
	if w := allowMany(t, b, "erin"); w[0] != 0 {
		t.Errorf("after a refused batch: wait %v, want admitted", w[0])
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
