package outboxstore_test

import (
	"context"
	"testing"

	"cloud.google.com/go/spanner"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
)

// TestPendingEventsByKey finds one user's outbox events on one counter
// among the other users' and counters' by key alone: the writers ask for
// them inside their transaction, where a SQL query would cost the emulator
// a scan of the outbox for each request.
func TestPendingEventsByKey(t *testing.T) {
	ctx := context.Background()
	db, sql := emulatortest.SpannerCountingSQL(t, emulatortest.New(t))
	like := func(id, user, key string, n int64) []*spanner.Mutation {
		return outboxstore.Pending(events.Event{ID: id, Kind: events.KindCounterDelta, Outbox: true,
			Deltas: counter.Deltas(key, counter.Values{Likes: n})}, user)
	}
	var ms []*spanner.Mutation
	for _, m := range [][]*spanner.Mutation{
		like("e1", "alice", "v", 1), like("e2", "alice", "v", -1), like("e3", "alice", "w", 1),
		like("e4", "bob", "v", 1), like("e5", "alice", "v2", 1),
	} {
		ms = append(ms, m...)
	}
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(ms)
	}); err != nil {
		t.Fatal(err)
	}
	before := sql.Load()
	var got []events.Event
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		var err error
		got, err = outboxstore.PendingEvents(ctx, tx, "alice", "v")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := []events.Event{
		{ID: "e1", Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas("v", counter.Values{Likes: 1})},
		{ID: "e2", Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas("v", counter.Values{Likes: -1})},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("PendingEvents (-want +got):\n%s", d)
	}
	if n := sql.Load() - before; n != 0 {
		t.Errorf("PendingEvents sent %d SQL statements, want none (reads by key)", n)
	}
}
