package countstore_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/countertest"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
)

// TestPublicReadsByKey reads the public counts of a folded counter, of one
// with a live shard row besides its snapshot and of an unknown id by key
// alone: the emulator runs every SQL query as a scan of its tables, and the
// instances' cache re-reads its ids this way twice a TTL.
func TestPublicReadsByKey(t *testing.T) {
	ctx := context.Background()
	db, sql := emulatortest.SpannerCountingSQL(t, emulatortest.New(t))
	w := countertest.New(db, reconcilestore.Options{})
	seed := append(counter.Deltas("v", counter.Values{Likes: 5}), counter.Deltas("quiet", counter.Values{Likes: 2, Comments: 1})...)
	if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "seed", Kind: events.KindCounterDelta, Deltas: seed}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	// Counted into a shard, not folded: v is a snapshot plus a shard row.
	if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "later", Kind: events.KindCounterDelta, Deltas: counter.Deltas("v", counter.Values{Likes: 1, Dislikes: 1})}}); err != nil {
		t.Fatal(err)
	}
	before := sql.Load()
	got, err := w.Counts.Public(ctx, []string{"v", "quiet", "none"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]counter.Values{"v": {Likes: 6, Dislikes: 1}, "quiet": {Likes: 2, Comments: 1}}
	if d := cmp.Diff(want, got.Values); d != "" {
		t.Errorf("Public values (-want +got):\n%s", d)
	}
	if got.ReadTime.IsZero() {
		t.Error("Public: no read timestamp")
	}
	if n := sql.Load() - before; n != 0 {
		t.Errorf("Public sent %d SQL statements, want none (reads by key)", n)
	}
}
