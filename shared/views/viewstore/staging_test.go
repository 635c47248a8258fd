package viewstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/viewstore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

func newStaging(t *testing.T) (*viewstore.Staging, *bigtable.Client) {
	t.Helper()
	c := emulatortest.Bigtable(t, emulatortest.New(t))
	return viewstore.NewStaging(c), c
}

// viewEvents is a batch's one event: n views of video.
func viewEvents(batch, video string, n int) []events.Event {
	return []events.Event{{
		ID: events.ID("views", batch, "0"), Kind: events.KindCounterDelta,
		Deltas:  []counter.Delta{{Key: video, Field: counter.Views, N: int64(n)}},
		Viewers: map[string][]uint64{video: {uint64(n), uint64(n) + 1}},
	}}
}

func put(t *testing.T, s *viewstore.Staging, batch string, evs []events.Event) {
	t.Helper()
	if err := s.Put(context.Background(), batch, evs); err != nil {
		t.Fatalf("Put(%q): %v", batch, err)
	}
}

func list(t *testing.T, s *viewstore.Staging, lo, hi, limit int) []views.Batch {
	t.Helper()
	bs, err := s.List(context.Background(), lo, hi, limit)
	if err != nil {
		t.Fatalf("List(%d, %d): %v", lo, hi, err)
	}
	return bs
}

// partOf reads the part of a row key: its three hex digits.
func partOf(t *testing.T, key string) int {
	t.Helper()
	p, err := strconv.ParseUint(key[:3], 16, 32)
	if err != nil || len(key) < 4 || key[3] != '#' {
		t.Fatalf("row key %q: not <part>#<batch>", key)
	}
	return int(p)
}

func keys(bs []views.Batch) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Key
	}
	return out
}

// TestRowKey: a batch's row is its part, three hex digits below Parts, and
// its id; the same id always gives the same row.
func TestRowKey(t *testing.T) {
	seen := map[int]bool{}
	for i := range 2000 {
		id := fmt.Sprintf("batch-%d", i)
		k := viewstore.RowKey(id)
		if k != viewstore.RowKey(id) {
			t.Fatalf("RowKey(%q) differs between calls", id)
		}
		p := partOf(t, k)
		if p < 0 || p >= counter.Parts || k[4:] != id {
			t.Fatalf("RowKey(%q) = %q", id, k)
		}
		seen[p] = true
	}
	// 2,000 ids over 4,096 parts: a hash spreads them over well over a
	// thousand parts; a constant or truncated one would not.
	if len(seen) < 1000 {
		t.Errorf("2,000 ids fell into %d parts", len(seen))
	}
}

// TestPutListDelete: a staged batch is listed whole with its events and
// the time it was written, in row order; putting it again leaves one
// batch; a deleted batch is no longer listed.
func TestPutListDelete(t *testing.T) {
	ctx := context.Background()
	s, _ := newStaging(t)
	start := time.Now().Add(-time.Second)
	want := map[string][]events.Event{}
	for i := range 5 {
		id := fmt.Sprintf("b%d", i)
		want[viewstore.RowKey(id)] = viewEvents(id, "v", i+1)
		put(t, s, id, want[viewstore.RowKey(id)])
	}
	put(t, s, "b2", viewEvents("b2", "v", 3)) // a redelivery

	got := list(t, s, 0, counter.Parts, 100)
	if len(got) != 5 {
		t.Fatalf("listed %q, want 5 batches", keys(got))
	}
	for i, b := range got {
		if i > 0 && got[i-1].Key >= b.Key {
			t.Errorf("not in row order: %q", keys(got))
		}
		if b.Err != nil || b.Written.Before(start) || b.Written.After(time.Now().Add(time.Second)) {
			t.Errorf("batch %s: written %v, err %v", b.Key, b.Written, b.Err)
		}
		if d := cmp.Diff(want[b.Key], b.Events); d != "" {
			t.Errorf("batch %s events (-want +got):\n%s", b.Key, d)
		}
	}
	if got := list(t, s, 0, counter.Parts, 2); len(got) != 2 {
		t.Errorf("limit 2: listed %d", len(got))
	}

	if err := s.Delete(ctx, got[:3]); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, nil); err != nil {
		t.Errorf("Delete of no batch: %v", err)
	}
	left := list(t, s, 0, counter.Parts, 100)
	if d := cmp.Diff(keys(got[3:]), keys(left)); d != "" {
		t.Errorf("after deleting three (-want +got):\n%s", d)
	}
	// Deleting a row already gone is no error (a fold that died after
	// its deletions and runs again).
	if err := s.Delete(ctx, got[:1]); err != nil {
		t.Errorf("Delete of a deleted batch: %v", err)
	}
}

// TestListParts: List of parts [lo, hi) returns exactly the batches whose
// part lies there, so that the partitions of a rollup fold every batch
// once; parts outside [0, Parts) or an empty range are refused.
func TestListParts(t *testing.T) {
	s, _ := newStaging(t)
	const n = 40
	for i := range n {
		id := fmt.Sprintf("p%d", i)
		put(t, s, id, viewEvents(id, "v", 1))
	}
	seen := map[string]int{}
	const partitions = 4
	for i := range partitions {
		lo, hi := i*counter.Parts/partitions, (i+1)*counter.Parts/partitions
		for _, b := range list(t, s, lo, hi, 100) {
			if p := partOf(t, b.Key); p < lo || p >= hi {
				t.Errorf("List(%d, %d) returned %s of part %d", lo, hi, b.Key, p)
			}
			seen[b.Key]++
		}
	}
	for i := range n {
		if k := viewstore.RowKey(fmt.Sprintf("p%d", i)); seen[k] != 1 {
			t.Errorf("batch %s listed %d times over the partitions", k, seen[k])
		}
	}
	// One part alone.
	k := viewstore.RowKey("p0")
	p := partOf(t, k)
	found := false
	for _, b := range list(t, s, p, p+1, 100) {
		found = found || b.Key == k
		if partOf(t, b.Key) != p {
			t.Errorf("List(%d, %d) returned %s", p, p+1, b.Key)
		}
	}
	if !found {
		t.Errorf("List(%d, %d) lacks %s", p, p+1, k)
	}
	for _, r := range [][2]int{{-1, 10}, {0, counter.Parts + 1}, {10, 10}, {11, 10}} {
		if _, err := s.List(context.Background(), r[0], r[1], 10); err == nil {
			t.Errorf("List(%d, %d): no error", r[0], r[1])
		}
	}
}

// TestUndecodableRow: a row Put never wrote is listed with Err, so that the
// fold reports and leaves it, and the other batches are listed as usual.
func TestUndecodableRow(t *testing.T) {
	s, c := newStaging(t)
	put(t, s, "good", viewEvents("good", "v", 1))
	m := bigtable.NewMutation()
	m.Set("v", "e", bigtable.Now(), []byte("not an events message"))
	if err := c.Open(viewstore.StagingTable).Apply(context.Background(), viewstore.RowKey("bad"), m); err != nil {
		t.Fatal(err)
	}
	got := list(t, s, 0, counter.Parts, 10)
	if len(got) != 2 {
		t.Fatalf("listed %q, want two batches", keys(got))
	}
	for _, b := range got {
		switch b.Key {
		case viewstore.RowKey("bad"):
			if b.Err == nil || b.Events != nil {
				t.Errorf("the undecodable row: err %v, events %v", b.Err, b.Events)
			}
		case viewstore.RowKey("good"):
			if b.Err != nil || len(b.Events) != 1 {
				t.Errorf("the good row: err %v, events %v", b.Err, b.Events)
			}
		default:
			t.Errorf("unexpected row %s", b.Key)
		}
	}
}

// TestStagedBefore: only the batches written before t are listed, a
// redelivered one by its latest write.
func TestStagedBefore(t *testing.T) {
	ctx := context.Background()
	s, _ := newStaging(t)
	put(t, s, "old", viewEvents("old", "v", 1))
	put(t, s, "again", viewEvents("again", "v", 1))
	time.Sleep(20 * time.Millisecond)
	cut := time.Now()
	time.Sleep(20 * time.Millisecond)
	put(t, s, "new", viewEvents("new", "v", 1))
	put(t, s, "again", viewEvents("again", "v", 1))

	got, err := s.StagedBefore(ctx, 0, counter.Parts, cut, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{viewstore.RowKey("old")}, keys(got)); d != "" {
		t.Errorf("staged before the cut (-want +got):\n%s", d)
	}
	got, err = s.StagedBefore(ctx, 0, counter.Parts, time.Now().Add(time.Second), 10)
	if err != nil || len(got) != 3 {
		t.Errorf("staged before now: %q %v, want all three", keys(got), err)
	}
}
