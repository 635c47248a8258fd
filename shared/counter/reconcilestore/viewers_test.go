package reconcilestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/countertest"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Unique viewers go to the shard the batch's views go to, are folded into
// the snapshot with them, and are read back (snapshot merged with the live
// shards) exactly while small; a redelivered batch adds nothing, and a
// reconciliation of the other fields leaves views and viewers alone.
func TestUniqueViewersShardedFoldedAndRead(t *testing.T) {
	cfg := emulatortest.New(t)
	ctx := context.Background()
	db, err := spannerdb.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Client.Close()
	w := countertest.New(db, reconcilestore.Options{})
	key := "vid"
	read := func(when string, wantViews, wantUnique int64) {
		t.Helper()
		c, err := w.Counts.Counts(ctx, []string{key}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if c.Values[key].Views != wantViews || c.Values[key].UniqueViewers != wantUnique {
			t.Fatalf("%s: views %d, unique viewers %d; want %d and %d", when, c.Values[key].Views, c.Values[key].UniqueViewers, wantViews, wantUnique)
		}
	}
	read("before any view", 0, 0)
	// 30 batches: users u0..u29 twice each (their second watch in the
	// next batch), so 60 views by 30 users, spread over the shards.
	for i := range 30 {
		users := []string{fmt.Sprintf("u%d", i), fmt.Sprintf("u%d", max(i-1, 0))}
		e := countertest.ViewsEvent(fmt.Sprintf("views-%d", i), key, 2, users...)
		for range 2 { // delivered twice
			if _, err := w.Outbox.Apply(ctx, []events.Event{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	read("in shards", 60, 30)
	if _, err := w.Folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	read("folded", 60, 30)
	if _, err := w.Outbox.Apply(ctx, []events.Event{countertest.ViewsEvent("views-late", key, 1, "u0", "late")}); err != nil {
		t.Fatal(err)
	}
	read("snapshot and a live shard", 61, 31)
	rep, err := w.Recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{&source{name: "likes", field: counter.Likes, truth: map[string]int64{key: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Corrected != 0 {
		t.Fatalf("reconciliation corrected %+v", rep.Corrections)
	}
	read("after reconciliation", 61, 31)
}
