package countstore_test

import (
	"context"
	"slices"
	"testing"

	"cloud.google.com/go/spanner"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/internal/countertest"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/spannerdb"
)

// seeded are stores whose counter "v" has five likes and "quiet" two, both
// counted and folded.
func seeded(t *testing.T) (*spannerdb.DB, *countertest.Stores) {
	t.Helper()
	db := emulatortest.Spanner(t, emulatortest.New(t))
	w := countertest.New(db, reconcilestore.Options{})
	seed := append(counter.Deltas("v", counter.Values{Likes: 5}), counter.Deltas("quiet", counter.Values{Likes: 2})...)
	if _, err := w.Outbox.Apply(context.Background(), []events.Event{{ID: "seed", Kind: events.KindCounterDelta, Deltas: seed}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Folds.Fold(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, w
}

// TestOwnExactWhileCounted holds the public counts read once, then follows a
// viewer's like through every state it passes (pending, counted into a
// shard, folded into the snapshot): merged with the old public values, the
// viewer's view has the like exactly once at each step, and an id nothing
// happened to is not read again.
func TestOwnExactWhileCounted(t *testing.T) {
	ctx := context.Background()
	db, w := seeded(t)
	ids := []string{"v", "quiet", "none"}
	held, err := w.Counts.Public(ctx, ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	if held.Values["v"].Likes != 5 || held.ReadTime.IsZero() {
		t.Fatalf("public: %+v", held)
	}

	view := func(step string, wantFresh ...string) {
		t.Helper()
		own, err := w.Counts.Own(ctx, countstore.OwnQuery{Viewer: "alice", IDs: ids, Cached: ids, Since: held.ReadTime})
		if err != nil {
			t.Fatal(err)
		}
		got := own.Merge(ids, held.Values)
		if got["v"].Likes != 6 || got["quiet"].Likes != 2 || !got["none"].IsZero() {
			t.Errorf("%s: alice sees %+v, want v 6 likes, quiet 2, none 0", step, got)
		}
		fresh := map[string]bool{}
		for id := range own.Fresh {
			fresh[id] = true
		}
		for _, id := range wantFresh {
			if !fresh[id] {
				t.Errorf("%s: %s not read again (fresh %v)", step, id, fresh)
			}
			delete(fresh, id)
		}
		if len(fresh) > 0 {
			t.Errorf("%s: read again without need: %v", step, fresh)
		}
	}

	like := events.Event{ID: "alice-like", Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas("v", counter.Values{Likes: 1})}
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(outboxstore.Pending(like, "alice"))
	}); err != nil {
		t.Fatal(err)
	}
	view("pending")
	if _, err := w.Outbox.Apply(ctx, []events.Event{like}); err != nil {
		t.Fatal(err)
	}
	view("counted into a shard after the public read", "v")
	if _, err := w.Folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	view("folded after the public read", "v")

	// Bob's view is the public one plus nothing of alice's.
	own, err := w.Counts.Own(ctx, countstore.OwnQuery{Viewer: "bob", IDs: ids, Cached: ids, Since: held.ReadTime})
	if err != nil {
		t.Fatal(err)
	}
	if got := own.Merge(ids, held.Values); got["v"].Likes != 6 || len(own.Reactions) != 0 || len(own.Pending) != 0 {
		t.Errorf("bob sees %+v (reactions %v, pending %v), want v 6 likes and nothing of his own", got, own.Reactions, own.Pending)
	}

	// Read anew after the fold, nothing has moved since: no id is read again.
	if held, err = w.Counts.Public(ctx, ids, 0); err != nil {
		t.Fatal(err)
	}
	view("public read after the fold")

	// Nothing held: every id is read, strongly.
	own, err = w.Counts.Own(ctx, countstore.OwnQuery{Viewer: "alice", IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	if got := own.Merge(ids, nil); got["v"].Likes != 6 || got["quiet"].Likes != 2 || len(own.Fresh) != 3 {
		t.Errorf("nothing held: %+v, fresh %v", got, own.Fresh)
	}
}

// TestOwnUniqueViewers: an id not held is read whole, its unique viewers
// merged from the snapshot and the live shards; a held id read again for
// its moved counts keeps the held unique-viewers estimate (the public part,
// as stale as the held value) while its other counts are exact.
func TestOwnUniqueViewers(t *testing.T) {
	ctx := context.Background()
	w := countertest.New(emulatortest.Spanner(t, emulatortest.New(t)), reconcilestore.Options{})
	if _, err := w.Outbox.Apply(ctx, []events.Event{countertest.ViewsEvent("early", "v", 3, "a", "b", "c")}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := w.Counts.Public(ctx, []string{"v"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Outbox.Apply(ctx, []events.Event{countertest.ViewsEvent("late", "v", 2, "c", "d")}); err != nil {
		t.Fatal(err)
	}
	ids := []string{"v"}
	own, err := w.Counts.Own(ctx, countstore.OwnQuery{Viewer: "alice", IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	if got := own.Merge(ids, nil)["v"]; got.Views != 5 || got.UniqueViewers != 4 {
		t.Errorf("not held: %+v, want 5 views by 4 viewers", got)
	}
	own, err = w.Counts.Own(ctx, countstore.OwnQuery{Viewer: "alice", IDs: ids, Cached: ids, Since: held.ReadTime})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := own.Fresh["v"]; !ok {
		t.Fatalf("held and moved, not read again: %+v", own)
	}
	if got := own.Merge(ids, held.Values)["v"]; got.Views != 5 || got.UniqueViewers != 3 {
		t.Errorf("held: %+v, want 5 views and the held 3 viewers", got)
	}
}

// TestOwnManyIsEachAlone reads four viewers' queries together and each
// alone: the same answers (counts merged with the held values, reactions,
// the ids read again), one read timestamp for all, and no more Spanner
// calls for the four than for the costliest one alone.
func TestOwnManyIsEachAlone(t *testing.T) {
	ctx := context.Background()
	db, w := seeded(t)
	held, err := w.Counts.Public(ctx, []string{"v", "quiet"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// After the public read: w is counted into a shard; alice has a like
	// pending on v in a row of her own; bob likes w, his share pending in a
	// summed row beside two other likes.
	if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "w-seed", Kind: events.KindCounterDelta, Deltas: counter.Deltas("w", counter.Values{Likes: 7})}}); err != nil {
		t.Fatal(err)
	}
	aliceLike := events.Event{ID: "alice-like", Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas("v", counter.Values{Likes: 1})}
	bobShare := outboxstore.Share{EventID: outboxstore.SummedID("b", 0), Key: "w", Values: counter.Values{Likes: 1}}
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(append(outboxstore.Pending(aliceLike, "alice"),
			outboxstore.Summed(bobShare.EventID, "w", counter.Values{Likes: 3}),
			spanner.InsertMap("Reactions", map[string]any{
				"UserId": "bob", "ContentId": "w", "Reaction": "like", "Version": 1, "Generation": 1,
				"UpdateTime": spanner.CommitTimestamp, "PendingShares": outboxstore.Entries([]outboxstore.Share{bobShare}),
			})))
	}); err != nil {
		t.Fatal(err)
	}

	qs := []countstore.OwnQuery{
		{Viewer: "alice", IDs: []string{"v", "quiet", "none"}, Cached: []string{"v", "quiet"}, Since: held.ReadTime},
		{Viewer: "bob", IDs: []string{"v", "w"}, Cached: []string{"v"}, Since: held.ReadTime},
		{Viewer: "alice", IDs: []string{"w"}},
		{Viewer: "carol", IDs: []string{"quiet"}, Cached: []string{"quiet"}, Since: held.ReadTime},
	}
	type view struct {
		Counts    map[string]counter.Values
		Reactions map[string]countstore.ViewerReaction
		Fresh     []string
	}
	viewOf := func(q countstore.OwnQuery, o countstore.Own) view {
		v := view{Counts: o.Merge(q.IDs, held.Values), Reactions: o.Reactions}
		for id := range o.Fresh {
			v.Fresh = append(v.Fresh, id)
		}
		slices.Sort(v.Fresh)
		return v
	}
	reads := func() int64 { return otelcount.Global().Spanner().Reads }
	var alone []view
	most := int64(0)
	for _, q := range qs {
		r0 := reads()
		o, err := w.Counts.Own(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, reads()-r0)
		alone = append(alone, viewOf(q, o))
	}
	want := []view{
		{Counts: map[string]counter.Values{"v": {Likes: 6}, "quiet": {Likes: 2}, "none": {}}, Reactions: map[string]countstore.ViewerReaction{}, Fresh: []string{"none"}},
		{Counts: map[string]counter.Values{"v": {Likes: 5}, "w": {Likes: 8}}, Reactions: map[string]countstore.ViewerReaction{"w": {Reaction: "like", Version: 1}}, Fresh: []string{"w"}},
		{Counts: map[string]counter.Values{"w": {Likes: 7}}, Reactions: map[string]countstore.ViewerReaction{}, Fresh: []string{"w"}},
		{Counts: map[string]counter.Values{"quiet": {Likes: 2}}, Reactions: map[string]countstore.ViewerReaction{}},
	}
	if diff := cmp.Diff(want, alone); diff != "" {
		t.Fatalf("each alone (-want +got):\n%s", diff)
	}

	r0 := reads()
	together, err := w.Counts.OwnMany(ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	if n := reads() - r0; n > most {
		t.Errorf("%d Spanner read calls for %d queries together, more than the %d of the costliest alone", n, len(qs), most)
	}
	var got []view
	for i, q := range qs {
		got = append(got, viewOf(q, together[i]))
		if !together[i].ReadTime.Equal(together[0].ReadTime) {
			t.Errorf("query %d read at %v, query 0 at %v", i, together[i].ReadTime, together[0].ReadTime)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("together (-want +got):\n%s", diff)
	}
}
