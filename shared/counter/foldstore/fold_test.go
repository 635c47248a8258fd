package foldstore_test

import (
	"context"
	"fmt"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/internal/countertest"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
)

// TestFoldPartitions folds the moved set in three partitions with several
// workers: every counter is folded by exactly one partition, the snapshots
// are exact, and each pass reports the age of the oldest unfolded delta.
func TestFoldPartitions(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)

	const n = 150
	var keys []string
	var deltas []counter.Delta
	for i := range n {
		k := fmt.Sprintf("v%03d", i)
		keys = append(keys, k)
		deltas = append(deltas, counter.Delta{Key: k, Field: counter.Likes, N: int64(i + 1)})
	}
	before := time.Now()
	if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "a", Kind: events.KindCounterDelta, Deltas: deltas}}); err != nil {
		t.Fatal(err)
	}
	// A second delta to the same counters: their markers keep the first
	// delta's time.
	if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "b", Kind: events.KindCounterDelta, Deltas: deltas}}); err != nil {
		t.Fatal(err)
	}
	afterFirst := time.Now()

	const parts = 3
	folded := 0
	for i := range parts {
		st, err := w.Folds.FoldPart(ctx, foldstore.Pass{Partition: i, Partitions: parts, Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		if st.Counters == 0 || st.Counters == n {
			t.Errorf("partition %d folded %d of %d counters: not a spread", i, st.Counters, n)
		}
		folded += st.Counters
		if st.Oldest.IsZero() || st.Oldest.Before(before.Add(-time.Second)) || st.Oldest.After(afterFirst) || st.Lag() <= 0 {
			t.Errorf("partition %d: oldest unfolded delta %v, lag %v; the deltas were written from %v", i, st.Oldest, st.Lag(), before)
		}
	}
	if folded != n {
		t.Errorf("partitions folded %d counters in all, want %d (each exactly once)", folded, n)
	}
	st, err := w.Folds.Fold(ctx)
	if err != nil || st.Counters != 0 || !st.Oldest.IsZero() || st.Lag() != 0 {
		t.Errorf("after every partition: %+v, %v; want nothing left to fold and no lag", st, err)
	}
	counted, pending, err := w.Counts.Totals(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got, want := counted[k].Likes+pending[k].Likes, int64(2*(i+1)); got != want {
			t.Errorf("%s: %d likes, want %d", k, got, want)
		}
	}

	for _, o := range []foldstore.Pass{{Partition: 3, Partitions: 3}, {Partition: -1, Partitions: 2}, {Partitions: counter.Parts + 1}} {
		if _, err := w.Folds.FoldPart(ctx, o); err == nil {
			t.Errorf("FoldPart(%+v) accepted", o)
		}
	}
}

func newWorld(t *testing.T) *countertest.Stores {
	t.Helper()
	return countertest.New(emulatortest.Spanner(t, emulatortest.New(t)), reconcilestore.Options{})
}
