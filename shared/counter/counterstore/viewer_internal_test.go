package counterstore

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// TestOwnManyPendingPastTheRange: a viewer with more pending rows than a
// read takes as one range (here 2) is read by the requested ids instead,
// each pending change counted once, wherever it sorts.
func TestOwnManyPendingPastTheRange(t *testing.T) {
	defer func(n int) { pendingRangeRows = n }(pendingRangeRows)
	pendingRangeRows = 2
	ctx := context.Background()
	db := emulatortest.Spanner(t, emulatortest.New(t))
	cs := New(db, Options{})
	var ms []*spanner.Mutation
	for i, key := range []string{"a1", "a2", "a3", "a4", "z"} {
		ev := events.Event{ID: fmt.Sprintf("e%d", i), Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas(key, counter.Values{Likes: int64(i + 1)})}
		ms = append(ms, Pending(ev, "alice")...)
	}
	// Bob's one row: his range is read whole whatever alice's holds.
	ms = append(ms, Pending(events.Event{ID: "b", Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas("z", counter.Values{Dislikes: 1})}, "bob")...)
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return tx.BufferWrite(ms) }); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{2, 1000} {
		pendingRangeRows = limit
		out, err := cs.OwnMany(ctx, []OwnQuery{{Viewer: "alice", IDs: []string{"a1", "z"}}, {Viewer: "bob", IDs: []string{"z"}}})
		if err != nil {
			t.Fatal(err)
		}
		alice, bob := out[0].Merge([]string{"a1", "z"}, nil), out[1].Merge([]string{"z"}, nil)
		if alice["a1"].Likes != 1 || alice["z"].Likes != 5 || bob["z"] != (counter.Values{Dislikes: 1}) {
			t.Errorf("range of %d rows: alice sees %+v, bob %+v; want a1 1 like, z 5 likes; bob z 1 dislike", limit, alice, bob)
		}
	}
}
