package spannerdb

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// A byte's lock is held against every other open of the file, as another
// process's would be: a second taker waits for the release or for its
// context, and another byte is free meanwhile.
func TestLockRangeExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	ctx := context.Background()
	unlock, err := lockRange(ctx, path, 7)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := lockRange(short, path, 7); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held byte taken again: %v, want the context's deadline", err)
	}
	other, err := lockRange(ctx, path, 8)
	if err != nil {
		t.Fatalf("another byte: %v", err)
	}
	other()

	taken := make(chan func(), 1)
	go func() {
		u, err := lockRange(ctx, path, 7)
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		taken <- u
	}()
	select {
	case u := <-taken:
		u()
		t.Fatal("the byte was taken while held")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	select {
	case u := <-taken:
		u()
	case <-time.After(10 * time.Second):
		t.Fatal("the byte was not taken after its release")
	}
}
