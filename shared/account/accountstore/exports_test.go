package accountstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/errs"
)

// TestExportsLimit: on the Firestore emulator, through two instances' stores,
// one export at a time per user and three a day; an ended export frees the
// next; a lost one holds the user until its deadline; the erasure forgets.
func TestExportsLimit(t *testing.T) {
	t.Parallel()
	fs := emulatortest.Firestore(t, emulatortest.New(t))
	ctx := context.Background()
	t0 := time.Now().UTC().Truncate(time.Second)
	clock := t0
	a, b := NewExports(fs, 3), NewExports(fs, 3)
	a.now = func() time.Time { return clock }
	b.now = a.now
	const run = 10 * time.Minute
	const atOnce, aDay = "exports at once (one of your account's is running)", "exports a day"
	var refusedAs string
	refusedFor := func(_ string, err error) time.Duration {
		t.Helper()
		var limited *errs.RateLimitedError
		if !errors.As(err, &limited) || limited.What != refusedAs || limited.RetryAfter <= 0 {
			t.Fatalf("Begin: %v, want refused as %q", err, refusedAs)
		}
		return limited.RetryAfter
	}

	lease, err := a.Begin(ctx, "alice", run)
	if err != nil || lease == "" {
		t.Fatalf("first export: %q, %v", lease, err)
	}
	clock = t0.Add(time.Minute)
	refusedAs = atOnce
	if wait := refusedFor(b.Begin(ctx, "alice", run)); wait != run-time.Minute {
		t.Errorf("second while the first runs: wait %v, want %v", wait, run-time.Minute)
	}
	if _, err := b.Begin(ctx, "bob", run); err != nil {
		t.Errorf("another user: %v", err)
	}
	if err := b.End(ctx, "alice", "not-the-lease"); err != nil {
		t.Fatal(err)
	}
	refusedFor(a.Begin(ctx, "alice", run))
	if err := b.End(ctx, "alice", lease); err != nil {
		t.Fatal(err)
	}
	lease2, err := a.Begin(ctx, "alice", run)
	if err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
	if err := a.End(ctx, "alice", lease2); err != nil {
		t.Fatal(err)
	}
	// The third is lost (never ended): it holds alice until its deadline.
	clock = t0.Add(time.Hour)
	if _, err := b.Begin(ctx, "alice", run); err != nil {
		t.Fatalf("third: %v", err)
	}
	clock = t0.Add(time.Hour + run)
	refusedAs = aDay
	if wait, want := refusedFor(a.Begin(ctx, "alice", run)), 24*time.Hour-time.Hour-run; wait != want {
		t.Errorf("fourth in a day: wait %v, want %v (until the first is a day old)", wait, want)
	}
	clock = t0.Add(24 * time.Hour)
	if _, err := a.Begin(ctx, "alice", run); err != nil {
		t.Fatalf("a day after the first: %v", err)
	}

	// Concurrent starts of one user: exactly one runs.
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 8 {
		s := []*Exports{a, b}[i%2]
		wg.Go(func() {
			if _, err := s.Begin(ctx, "carol", run); err == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			} else if !errors.As(err, new(*errs.RateLimitedError)) {
				t.Errorf("concurrent Begin: %v", err)
			}
		})
	}
	wg.Wait()
	if admitted != 1 {
		t.Errorf("8 concurrent exports of one user: %d admitted, want 1", admitted)
	}

	// The erasure deletes the record: alice starts afresh.
	if err := a.EraseUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := a.EraseUser(ctx, "nobody"); err != nil {
		t.Errorf("erasing a user who never exported: %v", err)
	}
	if _, err := a.Begin(ctx, "alice", run); err != nil {
		t.Errorf("after the erasure: %v", err)
	}
	// No limit.
	free := NewExports(fs, 0)
	for range 5 {
		if _, err := free.Begin(ctx, "dave", run); err != nil {
			t.Fatalf("no limit: %v", err)
		}
	}
}
