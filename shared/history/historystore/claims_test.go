package historystore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/history"
)

func ids(ws []history.Watch) map[string]bool {
	out := map[string]bool{}
	for _, w := range ws {
		out[w.EventID] = true
	}
	return out
}

// A watch belongs to the first batch that claims it: that batch owns it on
// every delivery, another batch carrying it again (a client's retry) never
// does, and deleting the history (the video, or all of it) does not free
// the claim: views are not taken back, and a deleted watch sent again is
// not a new view.
func TestClaimFirstBatchOwnsAWatch(t *testing.T) {
	h, bt := newStore(t)
	c := NewClaims(bt)
	ctx := context.Background()
	at := base()
	w1 := history.NewWatch("ann", "v1", at, 0)
	w2 := history.NewWatch("ann", "v1", at.Add(time.Minute), 0) // a rewatch: another view
	w3 := history.NewWatch("bob#x", "v1", at, 0)
	claim := func(batch string, ws ...history.Watch) map[string]bool {
		t.Helper()
		owned, err := c.Claim(ctx, batch, ws)
		if err != nil {
			t.Fatal(err)
		}
		return ids(owned)
	}
	if got := claim("b1", w1, w2, w1); len(got) != 2 || !got[w1.EventID] || !got[w2.EventID] {
		t.Fatalf("first batch owns %v, want w1 and w2 once each", got)
	}
	if got := claim("b1", w1, w2); len(got) != 2 {
		t.Fatalf("redelivered batch owns %v, want the same two", got)
	}
	if got := claim("b2", w1, w3); len(got) != 1 || !got[w3.EventID] {
		t.Fatalf("second batch owns %v, want only w3 (w1 is b1's)", got)
	}
	apply(t, h, w1, w2, w3)
	if err := h.DeleteVideo(ctx, "ann", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteBefore(ctx, "bob#x", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := claim("b3", w1, w2, w3); len(got) != 0 {
		t.Fatalf("after the deletions, a batch sending the watches again owns %v, want none", got)
	}
	if got := claim("b1", w1, w2); len(got) != 2 {
		t.Fatalf("after the deletions, the first batch owns %v, want its two still", got)
	}
	// The history itself is unaffected by the claims: ann's video is gone.
	if got := listAll(t, h, "ann", time.Time{}, 10); len(got) != 0 {
		t.Fatalf("ann's history after deleting v1: %+v", got)
	}
}

// Batches racing for the same watches: each watch has exactly one owner.
func TestClaimRacingBatches(t *testing.T) {
	_, bt := newStore(t)
	c := NewClaims(bt)
	ctx := context.Background()
	at := base()
	var ws []history.Watch
	for i := range 40 {
		ws = append(ws, history.NewWatch(fmt.Sprintf("u%d", i%7), "hot", at.Add(time.Duration(i)*time.Second), 0))
	}
	owners := make([]map[string]bool, 8)
	var wg sync.WaitGroup
	for b := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owned, err := c.Claim(ctx, fmt.Sprintf("race-%d", b), ws)
			if err != nil {
				t.Error(err)
				return
			}
			owners[b] = ids(owned)
		}()
	}
	wg.Wait()
	for _, w := range ws {
		n := 0
		for _, o := range owners {
			if o[w.EventID] {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("watch %s owned by %d batches, want 1", w.EventID, n)
		}
	}
}
