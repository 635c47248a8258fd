package countstore_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
)

// TestOwnAtTimestamp reads a viewer's view at the commit timestamps of her
// writes (a session token's) instead of strongly: at her latest write's she
// sees both of her likes, exactly, whatever the pipeline did since; at an
// earlier write's (a token from before her latest write, as another device
// holds) she sees what was true then, unless the instance holds public
// values read later, which raise the timestamp to theirs.
func TestOwnAtTimestamp(t *testing.T) {
	ctx := context.Background()
	db, w := seeded(t)
	ids := []string{"v", "quiet"}
	like := func(id string) (events.Event, time.Time) {
		t.Helper()
		ev := events.Event{ID: "alice-like-" + id, Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas(id, counter.Values{Likes: 1})}
		ts, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return tx.BufferWrite(append(outboxstore.Pending(ev, "alice"), spanner.InsertMap("Reactions", map[string]any{
				"UserId": "alice", "ContentId": id, "Reaction": "like", "Version": 1, "Generation": 1, "UpdateTime": spanner.CommitTimestamp,
			})))
		})
		if err != nil {
			t.Fatal(err)
		}
		return ev, ts
	}
	likeV, t1 := like("v")
	likeQuiet, t2 := like("quiet")

	type view struct {
		Counts    map[string]counter.Values
		Reactions map[string]countstore.ViewerReaction
	}
	both := view{
		Counts:    map[string]counter.Values{"v": {Likes: 6}, "quiet": {Likes: 3}},
		Reactions: map[string]countstore.ViewerReaction{"v": {Reaction: "like", Version: 1}, "quiet": {Reaction: "like", Version: 1}},
	}
	onlyV := view{
		Counts:    map[string]counter.Values{"v": {Likes: 6}, "quiet": {Likes: 2}},
		Reactions: map[string]countstore.ViewerReaction{"v": {Reaction: "like", Version: 1}},
	}
	read := func(step string, q countstore.OwnQuery, held map[string]counter.Values, want view, wantAt time.Time) {
		t.Helper()
		own, err := w.Counts.Own(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, view{Counts: own.Merge(q.IDs, held), Reactions: own.Reactions}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step, diff)
		}
		if !own.ReadTime.Equal(wantAt) {
			t.Errorf("%s: read at %v, want %v", step, own.ReadTime, wantAt)
		}
	}

	read("at the latest write", countstore.OwnQuery{Viewer: "alice", IDs: ids, At: t2}, nil, both, t2)
	read("at the earlier write", countstore.OwnQuery{Viewer: "alice", IDs: ids, At: t1}, nil, onlyV, t1)

	held, err := w.Counts.Public(ctx, ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	read("at the earlier write, public values held from after the latest", countstore.OwnQuery{Viewer: "alice", IDs: ids, Cached: ids, Since: held.ReadTime, At: t1}, held.Values, both, held.ReadTime)

	// Counted and folded since: at t2 her likes were pending, and read at
	// t2 they still are, each once.
	if _, err := w.Outbox.Apply(ctx, []events.Event{likeV, likeQuiet}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	read("at the latest write, after the count and the fold", countstore.OwnQuery{Viewer: "alice", IDs: ids, At: t2}, nil, both, t2)

	// A batch with a query that names no timestamp reads strongly, after
	// every timestamp named.
	out, err := w.Counts.OwnMany(ctx, []countstore.OwnQuery{{Viewer: "alice", IDs: ids, At: t1}, {Viewer: "bob", IDs: ids}})
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Merge(ids, nil); !out[0].ReadTime.After(t2) || got["quiet"].Likes != 3 {
		t.Errorf("mixed batch: read at %v (t2 %v), alice sees %+v", out[0].ReadTime, t2, got)
	}
}
