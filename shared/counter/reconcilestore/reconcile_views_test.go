package reconcilestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
)

// No source owns views or the unique-viewers sketches: a reconciliation that
// corrects a drifted field of a video leaves its views and unique viewers
// exactly as counted, whether they are folded into the snapshot, still in
// the shards, or both (and whether the correction updates the snapshot or
// creates it).
func TestReconcileLeavesViewsAndViewers(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, reconcilestore.Options{})
	viewers := func(prefix string, n int) []uint64 {
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = history.NewViewerHasher("test").Hash(fmt.Sprintf("%s-%d", prefix, i))
		}
		return hs
	}
	views := func(id, key string, hs []uint64) events.Event {
		return events.Event{ID: id, Kind: events.KindCounterDelta,
			Deltas:  []counter.Delta{{Key: key, Field: counter.Views, N: int64(len(hs))}},
			Viewers: map[string][]uint64{key: hs}}
	}
	drift := func(id, key string) events.Event {
		return events.Event{ID: id, Kind: events.KindCounterDelta, Deltas: []counter.Delta{{Key: key, Field: counter.Likes, N: 3}}}
	}
	// "folded": views and likes folded into the snapshot, then more views in
	// the shards. "unfolded": everything in the shards, no snapshot yet.
	apply := func(evs ...events.Event) {
		t.Helper()
		if _, err := w.Outbox.Apply(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	apply(views("b1", "folded", viewers("a", 40)), drift("d1", "folded"))
	if _, err := w.Folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	apply(views("b2", "folded", viewers("b", 25)))
	apply(views("b3", "unfolded", viewers("c", 30)), drift("d2", "unfolded"))

	before, err := w.Counts.Counts(ctx, []string{"folded", "unfolded"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]counter.Values{
		"folded":   {Likes: 3, Views: 65, UniqueViewers: 65},
		"unfolded": {Likes: 3, Views: 30, UniqueViewers: 30},
	}
	for k, w := range want {
		if got := before.Values[k]; got != w {
			t.Fatalf("%s before reconciling: %+v, want %+v", k, got, w)
		}
	}

	// The likes' truth is zero: both counters drifted by +3 likes.
	likes := &source{name: "likes", field: counter.Likes, truth: map[string]int64{}}
	rep, err := w.Recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{likes})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Corrected != 2 {
		t.Fatalf("corrected %d counters, want 2: %+v", rep.Corrected, rep.Corrections)
	}
	for _, c := range rep.Corrections {
		if c.Delta != (counter.Values{Likes: -3}) {
			t.Errorf("%s: correction %+v, want likes -3 only", c.Key, c.Delta)
		}
	}
	check := func(when string) {
		t.Helper()
		after, err := w.Counts.Counts(ctx, []string{"folded", "unfolded"}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for k, w := range want {
			w.Likes = 0
			if got := after.Values[k]; got != w {
				t.Errorf("%s %s: %+v, want %+v", k, when, got, w)
			}
		}
	}
	check("after reconciling")
	if _, err := w.Folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	check("after reconciling and folding")
	// A second reconciliation finds nothing: views are no source's.
	rep, err = w.Recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{likes})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Corrected != 0 {
		t.Errorf("second reconciliation corrected %d: %+v", rep.Corrected, rep.Corrections)
	}
}
