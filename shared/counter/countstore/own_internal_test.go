package countstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/cache"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/counter/outboxstore"
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
	cs := New(db)
	var ms []*spanner.Mutation
	for i, key := range []string{"a1", "a2", "a3", "a4", "z"} {
		ev := events.Event{ID: fmt.Sprintf("e%d", i), Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas(key, counter.Values{Likes: int64(i + 1)})}
		ms = append(ms, outboxstore.Pending(ev, "alice")...)
	}
	// Bob's one row: his range is read whole whatever alice's holds.
	ms = append(ms, outboxstore.Pending(events.Event{ID: "b", Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas("z", counter.Values{Dislikes: 1})}, "bob")...)
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

// TestOwnManyReadsTheRequestedReactions: a signed-in read takes the
// viewers' reaction rows of the ids asked for, wherever they sort, and no
// other: its rows read do not grow with the reactions the viewer holds on
// other items.
func TestOwnManyReadsTheRequestedReactions(t *testing.T) {
	ctx := context.Background()
	db := emulatortest.Spanner(t, emulatortest.New(t))
	var ms []*spanner.Mutation
	like := func(user, id string) {
		ms = append(ms, spanner.Insert(counterdb.Reactions, []string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime"},
			[]any{user, id, "like", int64(1), int64(1), spanner.CommitTimestamp}))
	}
	write := func() {
		t.Helper()
		if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return tx.BufferWrite(ms) }); err != nil {
			t.Fatal(err)
		}
		ms = nil
	}
	for _, id := range []string{"a1", "a2", "a3", "a4", "z"} {
		like("alice", id)
	}
	like("bob", "z")
	write()
	queries := []OwnQuery{{Viewer: "alice", IDs: []string{"a1", "z", "none"}}, {Viewer: "bob", IDs: []string{"a1", "z"}}}
	want := []map[string]ViewerReaction{
		{"a1": {Reaction: "like", Version: 1}, "z": {Reaction: "like", Version: 1}},
		{"z": {Reaction: "like", Version: 1}},
	}
	cs := New(db)
	rowsRead := func() int64 {
		t.Helper()
		before := otelcount.Global().Spanner()
		out, err := cs.OwnMany(ctx, queries)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if !maps.Equal(o.Reactions, want[i]) {
				t.Errorf("%s's reactions %v, want %v", queries[i].Viewer, o.Reactions, want[i])
			}
		}
		return otelcount.Global().Spanner().Minus(before).RowsRead
	}
	few := rowsRead()
	for i := range 50 {
		like("alice", fmt.Sprintf("b%02d", i))
	}
	write()
	if many := rowsRead(); many != few {
		t.Errorf("%d rows read with 50 more reactions of alice's elsewhere, %d without: the read takes rows it does not answer", many, few)
	}
}

// TestOwnManyRemembersCountedShares: a summed outbox row a signed-in read
// found gone (counted) is not read again by a later read; a row still
// there is read, and counted as the viewer's pending change, every time.
func TestOwnManyRemembersCountedShares(t *testing.T) {
	ctx := context.Background()
	db := emulatortest.Spanner(t, emulatortest.New(t))
	cs := New(db)
	gone := outboxstore.Share{EventID: outboxstore.SummedID("0000000000000001", 0), Key: "v", Values: counter.Values{Likes: 1}}
	there := outboxstore.Share{EventID: outboxstore.SummedID("0000000000000002", 0), Key: "w", Values: counter.Values{Likes: 1}}
	ms := []*spanner.Mutation{
		outboxstore.Summed(there.EventID, there.Key, counter.Values{Likes: 3}),
	}
	for _, r := range []struct {
		user  string
		share outboxstore.Share
	}{{"alice", gone}, {"bob", there}} {
		ms = append(ms, spanner.Insert(counterdb.Reactions, []string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime", "PendingShares"},
			[]any{r.user, r.share.Key, "like", int64(1), int64(1), spanner.CommitTimestamp, outboxstore.Entries([]outboxstore.Share{r.share})}))
	}
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return tx.BufferWrite(ms) }); err != nil {
		t.Fatal(err)
	}
	reads := func() int64 { return otelcount.Global().Spanner().Reads }
	var calls []int64
	for read := 1; read <= 2; read++ {
		n := reads()
		out, err := cs.OwnMany(ctx, []OwnQuery{{Viewer: "alice", IDs: []string{"v"}}})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, reads()-n)
		if p := out[0].Pending["v"]; !p.IsZero() {
			t.Errorf("read %d: alice's counted share pending: %+v", read, p)
		}
		out, err = cs.OwnMany(ctx, []OwnQuery{{Viewer: "bob", IDs: []string{"w"}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := out[0].Pending["w"]; p != (counter.Values{Likes: 1}) {
			t.Errorf("read %d: bob's share pending %+v, want 1 like", read, p)
		}
	}
	if calls[1] != calls[0]-1 {
		t.Errorf("Spanner read calls of alice's reads: %v; want the second one fewer (her share's row not read again)", calls)
	}
}

// sharesToRead skips a row known gone only at or after the timestamp it
// was found gone at.
func TestSharesToRead(t *testing.T) {
	s := &Store{gone: cache.New[outboxstore.RowKey, time.Time](10, nil)}
	t1 := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	k, other := outboxstore.RowKey{EventID: "a", Key: "v"}, outboxstore.RowKey{EventID: "b", Key: "v"}
	s.gone.Put(k, t1)
	for _, tc := range []struct {
		at   time.Time
		want []outboxstore.RowKey
	}{
		{t1.Add(-time.Microsecond), []outboxstore.RowKey{k, other}},
		{t1, []outboxstore.RowKey{other}},
		{t1.Add(time.Second), []outboxstore.RowKey{other}},
	} {
		if got := s.sharesToRead([]outboxstore.RowKey{k, other}, tc.at); !slices.Equal(got, tc.want) {
			t.Errorf("at %v: %v, want %v", tc.at, got, tc.want)
		}
	}
}

// TestOwnManyAtReadsSharesInOneTrip: a read at a named timestamp takes the
// summed outbox rows its viewers' shares name from the ids' pending rows,
// read beside the reactions: a viewer with a share costs no more read calls
// than one without, and is counted exactly (her share once, another
// viewer's row on the same item not, a counted share not). Past
// summedRangeRows rows an id, the named rows are read by key after the
// reactions, one call more, as exactly.
func TestOwnManyAtReadsSharesInOneTrip(t *testing.T) {
	defer func(n int) { summedRangeRows = n }(summedRangeRows)
	ctx := context.Background()
	db := emulatortest.Spanner(t, emulatortest.New(t))
	gone := outboxstore.Share{EventID: outboxstore.SummedID("0000000000000001", 0), Key: "w", Values: counter.Values{Likes: 1}}
	bobs := outboxstore.Share{EventID: outboxstore.SummedID("0000000000000002", 0), Key: "w", Values: counter.Values{Likes: 1}}
	others := outboxstore.Share{EventID: outboxstore.SummedID("0000000000000003", 0), Key: "w", Values: counter.Values{Dislikes: 1}}
	ms := []*spanner.Mutation{
		outboxstore.Summed(bobs.EventID, bobs.Key, counter.Values{Likes: 3}),
		outboxstore.Summed(others.EventID, others.Key, counter.Values{Dislikes: 2}),
	}
	for _, r := range []struct {
		user   string
		shares []outboxstore.Share
	}{{"alice", []outboxstore.Share{gone}}, {"bob", []outboxstore.Share{gone, bobs}}, {"carol", nil}} {
		ms = append(ms, spanner.Insert(counterdb.Reactions, []string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime", "PendingShares"},
			[]any{r.user, "w", "like", int64(1), int64(1), spanner.CommitTimestamp, outboxstore.Entries(r.shares)}))
	}
	at, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return tx.BufferWrite(ms) })
	if err != nil {
		t.Fatal(err)
	}
	reads := func() int64 { return otelcount.Global().Spanner().Reads }
	for _, tc := range []struct {
		rangeRows, extra int64
	}{{20, 0}, {1, 1}} {
		summedRangeRows = int(tc.rangeRows)
		calls := map[string]int64{}
		for _, v := range []string{"carol", "bob", "alice"} {
			cs := New(db) // nothing remembered
			n := reads()
			out, err := cs.OwnMany(ctx, []OwnQuery{{Viewer: v, IDs: []string{"w", "x"}, At: at}})
			if err != nil {
				t.Fatal(err)
			}
			calls[v] = reads() - n
			want := map[string]counter.Values{"bob": {Likes: 1}}[v]
			if p := out[0].Pending["w"]; p != want {
				t.Errorf("range of %d rows: %s's pending on w %+v, want %+v", tc.rangeRows, v, p, want)
			}
		}
		if calls["bob"] != calls["carol"]+tc.extra || calls["alice"] != calls["carol"]+tc.extra {
			t.Errorf("range of %d rows: read calls %v; want bob's and alice's %d more than carol's", tc.rangeRows, calls, tc.extra)
		}
	}
}
