package claimstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// newHistory is a history store on fresh tables of the emulator, and their
// client: the claims live in its watch_latest rows.
func newHistory(t testing.TB) (*historystore.Store, *bigtable.Client) {
	t.Helper()
	c := emulatortest.Bigtable(t, emulatortest.New(t))
	return historystore.New(c), c
}

func apply(t testing.TB, h *historystore.Store, ws ...history.Watch) {
	t.Helper()
	for _, w := range ws {
		if err := h.Apply(context.Background(), w); err != nil {
			t.Fatalf("Apply(%+v): %v", w, err)
		}
	}
}

// listed is the user's history, its first page of up to 100 entries.
func listed(t testing.TB, h *historystore.Store, userID string) []history.Entry {
	t.Helper()
	p, err := h.List(context.Background(), userID, nil, time.Time{}, 100)
	if err != nil {
		t.Fatalf("List(%q): %v", userID, err)
	}
	return p.Entries
}

func ids(ws []history.Watch) map[string]bool {
	out := map[string]bool{}
	for _, w := range ws {
		out[w.EventID] = true
	}
	return out
}

// watchAt is a watch of the video by the user dated `dated` before its
// receipt at recv.
func watchAt(user, video string, recv time.Time, dated time.Duration) history.Watch {
	w := history.NewWatch(user, video, recv.Add(-dated), 0)
	w.RecordedAt = recv
	return w
}

// A view belongs to the first batch that claims it: that batch owns it on
// every delivery, another batch carrying a watch within the window of it
// (a client's retry, a replay) never does, a backdated watch claims
// nothing, and deleting the history (the video, or all of it) does not free
// the claim: views are not taken back, and a deleted watch sent again is
// not a new view.
func TestClaimFirstBatchOwnsAView(t *testing.T) {
	h, bt := newHistory(t)
	const window = 24 * time.Hour
	c := NewClaims(bt, window)
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Millisecond).Add(-2 * window)
	w1 := watchAt("ann", "v1", start.Add(time.Minute), 0)
	w2 := watchAt("ann", "v1", start.Add(2*time.Minute), 0)                      // a replay in the window: the same view
	w3 := watchAt("bob#x", "v1", start.Add(time.Minute), 0)                      // another user
	w4 := watchAt("ann", "v1", start.Add(time.Minute+window), 0)                 // a window after w1: another view
	old := watchAt("ann", "v2", start.Add(time.Minute), window+time.Millisecond) // backdated
	claim := func(batch string, ws ...history.Watch) (owned, fresh map[string]bool) {
		t.Helper()
		got, err := c.Claim(ctx, batch, ws)
		if err != nil {
			t.Fatal(err)
		}
		return ids(got.Owned), ids(got.Fresh)
	}
	if got, fresh := claim("b1", w1, w2, w1, old, w4); len(got) != 2 || !got[w1.EventID] || !got[w4.EventID] || len(fresh) != 2 {
		t.Fatalf("first batch owns %v (fresh %v), want w1 and w4 once each", got, fresh)
	}
	if got, fresh := claim("b1", w2, w1, w4); len(got) != 2 || len(fresh) != 0 {
		t.Fatalf("redelivered batch owns %v (fresh %v), want the same two views, none fresh", got, fresh)
	}
	if got, _ := claim("b2", w2, w3); len(got) != 1 || !got[w3.EventID] {
		t.Fatalf("second batch owns %v, want only w3 (ann's view of the window is b1's)", got)
	}
	apply(t, h, w1, w2, w3)
	if err := h.DeleteVideo(ctx, "ann", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteBefore(ctx, "bob#x", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := claim("b3", w1, w2, w3); len(got) != 0 {
		t.Fatalf("after the deletions, a batch sending the watches again owns %v, want none", got)
	}
	if got, _ := claim("b1", w1, w4); len(got) != 2 {
		t.Fatalf("after the deletions, the first batch owns %v, want its two still", got)
	}
	// The history itself is unaffected by the claims: ann's video is gone.
	if got := listed(t, h, "ann"); len(got) != 0 {
		t.Fatalf("ann's history after deleting v1: %+v", got)
	}
}

// Batches racing for the same views: each view has exactly one owner.
func TestClaimRacingBatches(t *testing.T) {
	_, bt := newHistory(t)
	const window = time.Minute
	c := NewClaims(bt, window)
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	var ws []history.Watch
	for i := range 40 {
		// 7 users, each watch a window after the user's last: 40 views.
		ws = append(ws, watchAt(fmt.Sprintf("u%d", i%7), "hot", start.Add(time.Duration(i)*window), 0))
	}
	owners := make([]map[string]bool, 8)
	var wg sync.WaitGroup
	for b := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.Claim(ctx, fmt.Sprintf("race-%d", b), ws)
			if err != nil {
				t.Error(err)
				return
			}
			owners[b] = ids(got.Owned)
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
			t.Fatalf("view %s owned by %d batches, want 1", w.EventID, n)
		}
	}
}

// Expiring a user's history (the auto-delete horizon) leaves the claims: an
// expired watch sent again is history again but not a new view.
func TestClaimOutlivesExpire(t *testing.T) {
	h, bt := newHistory(t)
	claims := NewClaims(bt, 30*time.Minute)
	now := time.Now().UTC().Truncate(time.Millisecond)
	old := watchAt("kim", "old", now.Add(-48*time.Hour), 0) // received when watched: a view
	apply(t, h, old)
	if c, err := claims.Claim(t.Context(), "b1", []history.Watch{old}); err != nil || len(c.Owned) != 1 {
		t.Fatalf("Claim: %v, %v", c, err)
	}
	if n, err := h.Expire(t.Context(), "kim", now.Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("Expire: %d, %v; want 1 entry removed", n, err)
	}
	if got := listed(t, h, "kim"); len(got) != 0 {
		t.Fatalf("history after Expire: %+v", got)
	}
	if c, err := claims.Claim(t.Context(), "b2", []history.Watch{old}); err != nil || len(c.Owned) != 0 {
		t.Errorf("after Expire, another batch owns %v, %v; want none", c.Owned, err)
	}
	if c, err := claims.Claim(t.Context(), "b1", []history.Watch{old}); err != nil || len(c.Owned) != 1 || len(c.Fresh) != 0 {
		t.Errorf("after Expire, the first batch owns %v (fresh %v), %v; want its view, not fresh", c.Owned, c.Fresh, err)
	}
}

// The window rolls from the last counted view: two watches a second apart
// across an epoch-aligned boundary are one view, and a script recording a
// watch every 30 minutes for a day under a one-day window counts one view,
// whatever order its batches are applied in, concurrently or again.
func TestClaimWindowRolls(t *testing.T) {
	_, bt := newHistory(t)
	const window = 24 * time.Hour
	c := NewClaims(bt, window)
	ctx := t.Context()
	boundary := time.Now().UTC().Truncate(window).Add(-2 * window) // midnight UTC, two days ago
	across := []history.Watch{
		watchAt("ann", "v1", boundary.Add(-500*time.Millisecond), 0),
		watchAt("ann", "v1", boundary.Add(500*time.Millisecond), 0),
	}
	owned := 0
	for i, w := range across {
		got, err := c.Claim(ctx, fmt.Sprintf("across-%d", i), []history.Watch{w})
		if err != nil {
			t.Fatal(err)
		}
		owned += len(got.Owned)
	}
	if owned != 1 {
		t.Errorf("two watches a second apart across a window boundary count %d views, want 1", owned)
	}

	// The farming script: one watch every 30 minutes for a day, each in a
	// batch of its own, applied by 8 consumers at once, then all again.
	day := boundary.Add(-3 * window)
	var farmed []history.Watch
	for i := range 48 {
		farmed = append(farmed, watchAt("bot", "v1", day.Add(time.Duration(i)*30*time.Minute), 0))
	}
	views := func() int {
		var mu sync.Mutex
		n := 0
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < len(farmed); i += 8 {
					got, err := c.Claim(ctx, fmt.Sprintf("farm-%d", i), farmed[i:i+1])
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					n += len(got.Owned)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return n
	}
	if n := views(); n != 1 {
		t.Errorf("48 watches 30 minutes apart count %d views under a one-day window, want 1", n)
	}
	if n := views(); n != 1 {
		t.Errorf("the same batches delivered again own %d views, want the same 1", n)
	}
	// A window after the last farmed watch, a view counts again; of one
	// batch's watches the earliest received is judged first.
	next := watchAt("bot", "v1", farmed[47].RecordedAt.Add(window), 0)
	later := watchAt("bot", "v1", next.RecordedAt.Add(time.Hour), 0)
	if got, err := c.Claim(ctx, "farm-next", []history.Watch{later, next}); err != nil || len(got.Owned) != 1 || got.Owned[0].EventID != next.EventID {
		t.Errorf("watches a window and a window and an hour after the farming: owned %+v, %v; want the first only", got.Owned, err)
	}
}
