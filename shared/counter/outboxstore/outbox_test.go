package outboxstore_test

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/countertest"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/spannerdb"
)

// outboxWorld records outbox events the way a group-committing writer does.
type outboxWorld struct {
	db *spannerdb.DB
	*countertest.Stores
}

func newOutboxWorld(t *testing.T) outboxWorld {
	t.Helper()
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	return outboxWorld{db, countertest.New(db, reconcilestore.Options{})}
}

// record writes n like events on key in one transaction, as one batch when
// batch is set, and returns them.
func (w outboxWorld) record(t *testing.T, key string, n int, batched bool) []events.Event {
	t.Helper()
	b := outboxstore.NewBatch()
	var evs []events.Event
	var ms []*spanner.Mutation
	for i := range n {
		id := events.ID("t", key, fmt.Sprint(i), b)
		if batched {
			id = outboxstore.BatchedID(b, id)
		}
		ev := events.Event{ID: id, Kind: events.KindCounterDelta, Outbox: true,
			Deltas: []counter.Delta{{Key: key, Field: counter.Likes, N: 1}}}
		evs = append(evs, ev)
		ms = append(ms, outboxstore.Pending(ev, fmt.Sprintf("user-%d", i))...)
	}
	if _, err := w.db.InTx(context.Background(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(ms)
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// apply applies evs and returns the stats and the row writes of PendingDeltas.
func (w outboxWorld) apply(t *testing.T, evs []events.Event) (counter.ApplyStats, int64) {
	t.Helper()
	before := otelcount.Global().Spanner().WritesByTable["PendingDeltas"]
	st, err := w.Outbox.Apply(context.Background(), evs)
	if err != nil {
		t.Fatal(err)
	}
	return st, otelcount.Global().Spanner().WritesByTable["PendingDeltas"] - before
}

func (w outboxWorld) totals(t *testing.T, key string) (counted, pending int64) {
	t.Helper()
	c, p, err := w.Counts.Totals(context.Background(), []string{key})
	if err != nil {
		t.Fatal(err)
	}
	return c[key].Likes, p[key].Likes
}

// A batch counted whole is deleted in one mutation; a second delivery
// counts nothing.
func TestOutboxBatchDeletedAsOneRange(t *testing.T) {
	w := newOutboxWorld(t)
	evs := w.record(t, "hot", 20, true)
	st, deletes := w.apply(t, evs)
	if st.Applied != 20 || st.Duplicates != 0 || deletes != 1 {
		t.Fatalf("applied %d, duplicates %d, outbox row writes %d; want 20, 0, 1", st.Applied, st.Duplicates, deletes)
	}
	if c, p := w.totals(t, "hot"); c != 20 || p != 0 {
		t.Fatalf("counted %d, pending %d; want 20, 0", c, p)
	}
	st, deletes = w.apply(t, evs)
	if st.Applied != 0 || st.Duplicates != 20 || deletes != 0 {
		t.Fatalf("redelivery: applied %d, duplicates %d, outbox row writes %d; want 0, 20, 0", st.Applied, st.Duplicates, deletes)
	}
	if c, _ := w.totals(t, "hot"); c != 20 {
		t.Fatalf("counted %d after a redelivery, want 20", c)
	}
}

// A batch whose events arrive in several messages (split, or relayed in
// part) is counted exactly: each message deletes only its own rows.
func TestOutboxBatchSplitOverMessages(t *testing.T) {
	w := newOutboxWorld(t)
	evs := w.record(t, "hot", 10, true)
	plain := w.record(t, "hot", 3, false)
	first := append(append([]events.Event{}, evs[:4]...), plain...)
	st, deletes := w.apply(t, first)
	if st.Applied != 7 || deletes != 7 {
		t.Fatalf("first part: applied %d, outbox row writes %d; want 7, 7 (row by row)", st.Applied, deletes)
	}
	if c, p := w.totals(t, "hot"); c != 7 || p != 6 {
		t.Fatalf("counted %d, pending %d; want 7, 6", c, p)
	}
	// The rest, with duplicates of the first part: every row left of the
	// batch is in this message, so they go in one range delete.
	st, deletes = w.apply(t, append(evs[3:], plain[0]))
	if st.Applied != 6 || st.Duplicates != 2 || deletes != 1 {
		t.Fatalf("second part: applied %d, duplicates %d, outbox row writes %d; want 6, 2, 1", st.Applied, st.Duplicates, deletes)
	}
	if c, p := w.totals(t, "hot"); c != 13 || p != 0 {
		t.Fatalf("counted %d, pending %d; want 13, 0", c, p)
	}
}

func TestOutboxBatchIDs(t *testing.T) {
	a, b := outboxstore.NewBatch(), outboxstore.NewBatch()
	if a == b || len(a) != 16 {
		t.Fatalf("batch ids %q, %q", a, b)
	}
	id := outboxstore.BatchedID(a, events.ID("r", "u", "c"))
	if len(id) > events.MaxEventIDLen {
		t.Fatalf("batched id %q longer than %d", id, events.MaxEventIDLen)
	}
}

// A share's stored entry reads back as the share; an entry without its
// last fields (written before they existed) reads them as zero; anything
// else stored is refused, never read as some other share.
func TestShareEntry(t *testing.T) {
	id := outboxstore.SummedID(outboxstore.NewBatch(), 3)
	for _, v := range []counter.Values{{Likes: -1, Dislikes: 2, Views: 1 << 40}, {Likes: 1, Threads: -3}} {
		sh := outboxstore.Share{EventID: id, Key: "v", Values: v}
		got, err := outboxstore.ParseShare("v", sh.Entry())
		if err != nil || got != sh {
			t.Fatalf("round trip of %q: %+v %v, want %+v", sh.Entry(), got, err, sh)
		}
	}
	// A reaction's share keeps the form of the first entries.
	if got, want := (outboxstore.Share{EventID: id, Values: counter.Values{Likes: 1}}).Entry(), id+"/1/0/0/0/0"; got != want {
		t.Errorf("entry %q, want %q", got, want)
	}
	if got, err := outboxstore.ParseShare("v", id+"/0/1/0/0/0"); err != nil || got.Values != (counter.Values{Dislikes: 1}) {
		t.Errorf("an entry of five values read as %+v, %v", got, err)
	}
	for _, bad := range []string{"", id, id + "/1/0/0/0", id + "/1/0/0/0/0/0/0", "/1/0/0/0/0", id + "/1/x/0/0/0", id + "/1/0/0/0/0/"} {
		if got, err := outboxstore.ParseShare("v", bad); err == nil {
			t.Errorf("%q read as %+v", bad, got)
		}
	}
	if e := outboxstore.Entries(nil); e != nil {
		t.Errorf("no shares stored as %q, want NULL", e)
	}
}
