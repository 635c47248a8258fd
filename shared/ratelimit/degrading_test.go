package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/errs"
)

// switchable is a shared limit that can stop answering: while frozen, a
// call waits until its context ends, as a call to a frozen cluster does.
type switchable struct {
	next   Shared
	frozen atomic.Bool
	calls  atomic.Int64 // calls that reached the frozen store
}

func (s *switchable) wait(ctx context.Context) error {
	s.calls.Add(1)
	<-ctx.Done()
	return errs.Backend("rate limit", ctx.Err())
}

func (s *switchable) Allow(ctx context.Context, u string) (time.Duration, error) {
	if s.frozen.Load() {
		return 0, s.wait(ctx)
	}
	return s.next.Allow(ctx, u)
}

func (s *switchable) AllowMany(ctx context.Context, us []string) ([]time.Duration, error) {
	if s.frozen.Load() {
		return nil, s.wait(ctx)
	}
	return s.next.AllowMany(ctx, us)
}

type degradedCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *degradedCounts) RateLimitDegraded(_ context.Context, kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[kind] += n
}

func (c *degradedCounts) of(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// captureLogs sends the default logger's lines to a buffer for the test.
func captureLogs(t *testing.T) *syncBuffer {
	t.Helper()
	var b syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&b, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &b
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), `"msg":"`+msg+`"`)
}

// TestDegradingFallsBackAndRecovers: while the shared store answers, two
// instances share one limit; while it does not, each instance decides
// alone after waiting the budget once, its own limit holds, and the
// degradation is counted and logged at most once a minute; once the store
// answers again the shared limit is back.
func TestDegradingFallsBackAndRecovers(t *testing.T) {
	logs := captureLogs(t)
	c := newClient(t)
	minute := time.Now().UTC().Truncate(time.Minute)
	clk := &clock{t: minute.Add(10 * time.Second)}
	const (
		limit  = 4
		budget = 50 * time.Millisecond
	)
	store := &switchable{next: limiterAt(c, "history", limit, clk)}
	counts := &degradedCounts{}
	instance := func() *Degrading {
		d := NewDegrading(store, "history", limit, 2, budget, counts) // two instances: a share of the limit each
		d.now = clk.now
		return d
	}
	a, b := instance(), instance()
	ctx := t.Context()
	allowed := func(d *Degrading, user string) bool {
		t.Helper()
		wait, err := d.Allow(ctx, user)
		if err != nil {
			t.Fatalf("Allow(%q): %v", user, err)
		}
		return wait == 0
	}

	// Healthy: one limit across both instances.
	for i := range limit {
		if !allowed([]*Degrading{a, b}[i%2], "alice") {
			t.Fatalf("healthy: action %d of %d refused", i+1, limit)
		}
	}
	if allowed(b, "alice") {
		t.Fatal("healthy: the shared limit did not hold across instances")
	}
	if n := counts.of("history"); n != 0 {
		t.Fatalf("healthy: %d actions counted as degraded", n)
	}

	// Frozen: the first action waits the budget, the next ones do not wait
	// at all; each instance admits the per-instance limit's burst per user,
	// alone.
	burst, _ := GCRA{PerMinute: limit}.shape()
	store.frozen.Store(true)
	start := time.Now()
	if !allowed(a, "alice") {
		t.Fatal("frozen: the first action of a fresh per-instance limit was refused")
	}
	if took := time.Since(start); took < budget || took > budget+2*time.Second {
		t.Errorf("frozen: the first action took %v, want about the budget %v", took, budget)
	}
	start = time.Now()
	for range burst - 1 {
		if !allowed(a, "alice") {
			t.Fatal("frozen: an action under the per-instance limit was refused")
		}
	}
	if allowed(a, "alice") {
		t.Error("frozen: the per-instance limit did not hold")
	}
	if took := time.Since(start); took > budget {
		t.Errorf("frozen: actions after the first took %v, waiting for the store again", took)
	}
	if got := store.calls.Load(); got != 1 {
		t.Errorf("frozen: %d calls reached the store within a probe period, want 1", got)
	}
	// The other instance has its own count, and its own first wait.
	if !allowed(b, "alice") {
		t.Error("frozen: the other instance refused a user it had not seen degraded")
	}
	waits, err := a.AllowMany(ctx, []string{"bob", "alice", "bob"})
	if err != nil || len(waits) != 3 || waits[0] != 0 || waits[1] == 0 || waits[2] != 0 {
		t.Errorf("frozen: AllowMany = %v, %v; want bob twice admitted, alice refused", waits, err)
	}
	if got, want := counts.of("history"), (burst+1)+1+3; got != want {
		t.Errorf("frozen: %d actions counted as degraded, want %d", got, want)
	}

	// A minute of degraded actions writes one more line per instance, not
	// one per action.
	for i := range 30 {
		clk.set(minute.Add(10*time.Second + time.Duration(i)*2500*time.Millisecond))
		allowed(a, "user-"+string(rune('a'+i%26)))
	}
	if got := logs.count(LogDegraded); got != 3 {
		t.Errorf("%d %q lines, want 3 (one when each instance degraded, one a minute later)", got, LogDegraded)
	}

	// Thawed: the next probe finds the store; the shared limit holds again.
	store.frozen.Store(false)
	clk.set(minute.Add(2 * time.Minute))
	for i := range limit {
		if !allowed(a, "carol") {
			t.Fatalf("thawed: action %d of %d refused", i+1, limit)
		}
	}
	if allowed(b, "carol") {
		t.Error("thawed: the other instance did not go back to the shared limit")
	}
	if got := logs.count(LogRecovered); got != 2 {
		t.Errorf("%d %q lines, want 2 (one per instance)", got, LogRecovered)
	}
}

// TestDegradingFailsWhatIsNoOutage: a caller that has gone and an error
// that is no unavailability are answered as errors, not decided locally.
func TestDegradingFailsWhatIsNoOutage(t *testing.T) {
	store := &switchable{}
	store.frozen.Store(true)
	d := NewDegrading(store, "reactions", 5, 1, time.Minute, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := d.AllowMany(ctx, []string{"alice"}); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("caller's deadline within the budget: %v; want the backend error", err)
	}

	bug := errors.New("ratelimit: unexpected answer")
	d = NewDegrading(failing{bug}, "reactions", 5, 1, time.Second, nil)
	if _, err := d.Allow(t.Context(), "alice"); !errors.Is(err, bug) {
		t.Errorf("a bug: %v; want it returned", err)
	}
}

type failing struct{ err error }

func (f failing) Allow(context.Context, string) (time.Duration, error) { return 0, f.err }
func (f failing) AllowMany(context.Context, []string) ([]time.Duration, error) {
	return nil, f.err
}

// blackhole accepts connections and never answers, as a frozen Bigtable
// cluster does.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestBigtableUnansweredDegrades: the deployed limiter on a Bigtable that
// never answers refuses with 503 on its own (fail closed), and admits
// within the budget when it degrades.
func TestBigtableUnansweredDegrades(t *testing.T) {
	// The client connects to the emulator the environment names.
	t.Setenv("BIGTABLE_EMULATOR_HOST", blackhole(t))
	c, err := bigtable.NewClientWithConfig(t.Context(), "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	shared := NewBigtable(c, "reactions", 5)

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := shared.AllowMany(ctx, []string{"alice"}); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Fatalf("the shared limit alone: %v; want ErrBackendUnavailable", err)
	}

	counts := &degradedCounts{}
	d := NewDegrading(shared, "reactions", 5, 1, 200*time.Millisecond, counts)
	start := time.Now()
	waits, err := d.AllowMany(t.Context(), []string{"alice", "bob"})
	if took := time.Since(start); err != nil || len(waits) != 2 || waits[0] != 0 || waits[1] != 0 || took > 2*time.Second {
		t.Fatalf("degrading: %v, %v after %v; want both admitted after about the budget", waits, err, took)
	}
	if n := counts.of("reactions"); n != 2 {
		t.Errorf("%d actions counted as degraded, want 2", n)
	}
}

// mostInAnySpan is the most times of ts within one span [t, t+span).
func mostInAnySpan(ts []time.Time, span time.Duration) int {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, j := 0, 0; i < len(ts); i++ {
		for j < len(ts) && ts[j].Before(ts[i].Add(span)) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// TestDegradedInstancesHoldTwiceTheLimit: instances of one function that
// share nothing but a Bigtable that fails each decide a user's limit alone,
// and a user whose requests reach every one of them, as fast as the
// instances take them, for six minutes, is admitted at most twice the
// limit in any minute: each instance's share is ⌊2·limit/instances⌋. With
// more instances than twice the limit, each admits one in any
// ⌈instances/(2·limit)⌉ minutes, and that span holds at most twice the
// limit a minute of it.
func TestDegradedInstancesHoldTwiceTheLimit(t *testing.T) {
	captureLogs(t)
	// Nothing listens at the address: every call fails at once, as a
	// Bigtable that refuses connections does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	t.Setenv("BIGTABLE_EMULATOR_HOST", dead)
	const limit = 10
	for _, tc := range []struct {
		instances int
		span      time.Duration // the span the bound holds over
	}{{1, time.Minute}, {3, time.Minute}, {6, time.Minute}, {20, time.Minute}, {25, 2 * time.Minute}, {70, 4 * time.Minute}} {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clk := &clock{t: start}
		counts := &degradedCounts{}
		var instances []*Degrading
		for range tc.instances {
			c, err := bigtable.NewClientWithConfig(t.Context(), "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			d := NewDegrading(limiterAt(c, "reactions", limit, clk), "reactions", limit, tc.instances, time.Second, counts)
			d.now = clk.now
			instances = append(instances, d)
		}
		var admitted []time.Time
		requests := 0
		for at := start; at.Before(start.Add(6 * time.Minute)); at = at.Add(500 * time.Millisecond) {
			clk.set(at)
			for _, d := range instances {
				wait, err := d.Allow(t.Context(), "alice")
				if err != nil {
					t.Fatalf("%d instances: %v", tc.instances, err)
				}
				requests++
				if wait == 0 {
					admitted = append(admitted, at)
				}
			}
		}
		if counts.of("reactions") != requests {
			t.Fatalf("%d instances: %d of %d requests decided by the instances alone; the store answered", tc.instances, counts.of("reactions"), requests)
		}
		most := mostInAnySpan(admitted, tc.span)
		bound := 2 * limit * int(tc.span/time.Minute)
		t.Logf("%d instances of a limit of %d a minute: %d admitted in 6 minutes, at most %d in any %v (bound %d)",
			tc.instances, limit, len(admitted), most, tc.span, bound)
		if most > bound {
			t.Errorf("%d instances: %d admitted in one %v, more than twice the limit (%d)", tc.instances, most, tc.span, bound)
		}
		if len(admitted) < 6*limit/2 {
			t.Errorf("%d instances: %d admitted in 6 minutes; the degraded limit is no limit to keep to, not a refusal", tc.instances, len(admitted))
		}
	}
}

// TestLocalForgetsPastUsers: the per-instance limit holds per user and
// keeps only users whose allowance is not back in full.
func TestLocalForgetsPastUsers(t *testing.T) {
	l := NewLocal(4) // a burst of 2
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if l.Allow("a", at) != 0 || l.Allow("a", at) != 0 || l.Allow("a", at) == 0 {
		t.Error("the limit of 4 a minute, a burst of 2, did not hold")
	}
	if l.Allow("b", at) != 0 {
		t.Error("another user was refused")
	}
	if l.Allow("c", at.Add(2*sweepEvery)) != 0 || l.users() != 1 {
		t.Errorf("after two sweep periods: %d users remembered, want 1 (the newest)", l.users())
	}
}
