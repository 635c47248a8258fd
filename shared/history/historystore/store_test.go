package historystore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/topology"
)

func TestApplyListNewestFirst(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	ws := []history.Watch{
		history.NewWatch("alice", "v1", b, 0),
		history.NewWatch("alice", "v2", b.Add(time.Hour), 12.5),
		history.NewWatch("alice", "v3", b.Add(2*time.Hour), 3600),
		history.NewWatch("alice", "v4", b.Add(-time.Hour), history.MaxPositionSeconds),
		history.NewWatch("alice", "v5", b.Add(time.Millisecond), 0.001),
	}
	// Applied in no particular order.
	apply(t, h, ws[3], ws[0], ws[4], ws[2], ws[1])

	want := []history.Entry{entry(ws[2]), entry(ws[1]), entry(ws[4]), entry(ws[0]), entry(ws[3])}
	p, err := h.List(t.Context(), "alice", nil, time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, p.Entries); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if p.Next != nil {
		t.Errorf("List of 5 entries with size 10: Next = %+v, want nil", p.Next)
	}
	for _, e := range p.Entries {
		if e.WatchedAt.Location() != time.UTC {
			t.Errorf("entry %+v: time not in UTC", e)
		}
	}
	checkOneRowPerVideo(t, h, "alice", want)

	// A user with no history has an empty first page.
	p, err = h.List(t.Context(), "nobody", nil, time.Time{}, 10)
	if err != nil || len(p.Entries) != 0 || p.Next != nil {
		t.Errorf("List of an empty history = %+v, %v", p, err)
	}
}

func TestRewatchKeepsOneEntryAtTheLatestWatch(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	w := func(user string, d time.Duration, pos float64) history.Watch {
		return history.NewWatch(user, "v", b.Add(d), pos)
	}
	other := history.NewWatch("", "other", b.Add(30*time.Minute), 1)

	tests := []struct {
		name  string
		apply []history.Watch // of user name, video "v"
		want  history.Watch
	}{
		{"in order", []history.Watch{w("in-order", 0, 1), w("in-order", time.Hour, 2), w("in-order", 2*time.Hour, 3)}, w("in-order", 2*time.Hour, 3)},
		{"out of order", []history.Watch{w("out-of-order", 2*time.Hour, 3), w("out-of-order", 0, 1), w("out-of-order", time.Hour, 2)}, w("out-of-order", 2*time.Hour, 3)},
		{"newest first then older", []history.Watch{w("older", time.Hour, 9), w("older", -time.Hour, 1)}, w("older", time.Hour, 9)},
		{"same event twice", []history.Watch{w("twice", time.Hour, 7), w("twice", time.Hour, 7)}, w("twice", time.Hour, 7)},
		{"same event redelivered after a rewatch", []history.Watch{w("redelivered", 0, 1), w("redelivered", time.Hour, 2), w("redelivered", 0, 1), w("redelivered", time.Hour, 2)}, w("redelivered", time.Hour, 2)},
		{"one millisecond apart", []history.Watch{w("ms", time.Millisecond, 2), w("ms", 0, 1)}, w("ms", time.Millisecond, 2)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			user := tc.want.UserID
			o := other
			o.UserID, o.EventID = user, history.WatchEventID(user, o.VideoID, o.WatchedAt)
			apply(t, h, o)
			apply(t, h, tc.apply...)
			want := []history.Entry{entry(tc.want), entry(o)}
			if tc.want.WatchedAt.Before(o.WatchedAt) {
				want = []history.Entry{entry(o), entry(tc.want)}
			}
			if diff := cmp.Diff(want, listAll(t, h, user, time.Time{}, 10)); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
			checkOneRowPerVideo(t, h, user, want)
		})
	}
}

func TestApplyConcurrentRewatchesConverge(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	const (
		workers = 8
		watches = 12
	)
	var all []history.Watch
	for i := range watches {
		all = append(all, history.NewWatch("bob", "v", b.Add(time.Duration(i)*time.Minute), float64(i)))
		all = append(all, history.NewWatch("bob", fmt.Sprintf("w%d", i%3), b.Add(time.Duration(i)*time.Second), float64(i)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*len(all))
	for g := range workers {
		wg.Go(func() {
			// Every worker delivers every event, in its own order: the
			// duplicates and reorderings of at-least-once delivery.
			order := slices.Clone(all)
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, w := range order {
				if err := h.Apply(context.Background(), w); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Apply: %v", err)
	}
	latest := func(video string) history.Watch {
		var best history.Watch
		for _, w := range all {
			if w.VideoID == video && w.WatchedAt.After(best.WatchedAt) {
				best = w
			}
		}
		return best
	}
	want := []history.Entry{entry(latest("v")), entry(latest("w2")), entry(latest("w1")), entry(latest("w0"))}
	if diff := cmp.Diff(want, listAll(t, h, "bob", time.Time{}, 100)); diff != "" {
		t.Errorf("List after concurrent applies (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "bob", want)
}

func TestApplyKeysAWatchByItsMillisecond(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	// A watch whose time carries microseconds (built by hand, not by
	// NewWatch) is the watch of its millisecond.
	w := history.Watch{UserID: "carol", VideoID: "v", WatchedAt: b.Add(123 * time.Microsecond), PositionSeconds: 5}
	w.EventID = history.WatchEventID(w.UserID, w.VideoID, w.WatchedAt)
	apply(t, h, w, history.NewWatch("carol", "v", b.Add(time.Hour), 6))
	want := []history.Entry{{VideoID: "v", WatchedAt: b.Add(time.Hour), PositionSeconds: 6}}
	if diff := cmp.Diff(want, listAll(t, h, "carol", time.Time{}, 10)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "carol", want)
}

func TestListPages(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	var ws []history.Watch
	for i := range 25 {
		ws = append(ws, history.NewWatch("dave", fmt.Sprintf("v%02d", i), b.Add(time.Duration(i)*time.Second), float64(i)))
	}
	// Watches at one time, ordered by video id on the pages, and a
	// rewatch that moves one video to the front.
	for _, v := range []string{"s-b", "s-a", "s-c", "s-a-"} {
		ws = append(ws, history.NewWatch("dave", v, b.Add(7*time.Second+time.Millisecond), 1))
	}
	ws = append(ws, history.NewWatch("dave", "v03", b.Add(time.Hour), 99))
	apply(t, h, ws...)

	want := []history.Entry{{VideoID: "v03", WatchedAt: b.Add(time.Hour), PositionSeconds: 99}}
	for i := 24; i >= 0; i-- {
		if i == 7 {
			for _, v := range []string{"s-a", "s-a-", "s-b", "s-c"} {
				want = append(want, history.Entry{VideoID: v, WatchedAt: b.Add(7*time.Second + time.Millisecond), PositionSeconds: 1})
			}
		}
		if i != 3 {
			want = append(want, history.Entry{VideoID: fmt.Sprintf("v%02d", i), WatchedAt: b.Add(time.Duration(i) * time.Second), PositionSeconds: float64(i)})
		}
	}
	if len(want) != 29 {
		t.Fatalf("test expects 29 entries, built %d", len(want))
	}
	for _, size := range []int{1, 2, 4, 7, 10, 28, 29, 30, 100} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			if diff := cmp.Diff(want, listAll(t, h, "dave", time.Time{}, size)); diff != "" {
				t.Errorf("all pages (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("exact last page has no cursor", func(t *testing.T) {
		p1, err := h.List(t.Context(), "dave", nil, time.Time{}, 20)
		if err != nil || p1.Next == nil {
			t.Fatalf("first page: %+v, %v", p1, err)
		}
		p2, err := h.List(t.Context(), "dave", p1.Next, time.Time{}, 9)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want[20:], p2.Entries); diff != "" || p2.Next != nil {
			t.Errorf("last 9 entries with size 9: Next = %+v, entries (-want +got):\n%s", p2.Next, diff)
		}
	})

	t.Run("cursor at an entry deleted since", func(t *testing.T) {
		p1, err := h.List(t.Context(), "dave", nil, time.Time{}, 5)
		if err != nil || p1.Next == nil {
			t.Fatalf("first page: %+v, %v", p1, err)
		}
		// The cursor names a row by position, not by existence.
		if err := h.DeleteVideo(t.Context(), "dave", p1.Next.VideoID); err != nil {
			t.Fatal(err)
		}
		p2, err := h.List(t.Context(), "dave", p1.Next, time.Time{}, 3)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want[5:8], p2.Entries); diff != "" {
			t.Errorf("page after a deleted cursor row (-want +got):\n%s", diff)
		}
	})
}

func TestListHorizon(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	horizon := base()
	at := func(d time.Duration, v string) history.Watch { return history.NewWatch("erin", v, horizon.Add(d), 0) }
	apply(t, h,
		at(-24*time.Hour, "old"),
		at(-time.Millisecond, "just-before"),
		at(0, "at-horizon"),
		at(0, "at-horizon-2"),
		at(time.Millisecond, "just-after"),
		at(time.Hour, "new"),
	)
	wantVisible := []history.Entry{
		entry(at(time.Hour, "new")),
		entry(at(time.Millisecond, "just-after")),
		entry(at(0, "at-horizon")),
		entry(at(0, "at-horizon-2")),
	}
	for _, size := range []int{1, 3, 4, 10} {
		if diff := cmp.Diff(wantVisible, listAll(t, h, "erin", horizon, size)); diff != "" {
			t.Errorf("size %d: List before the horizon (-want +got):\n%s", size, diff)
		}
	}
	// The last visible page has no cursor, though older rows exist.
	p, err := h.List(t.Context(), "erin", nil, horizon, 4)
	if err != nil || len(p.Entries) != 4 || p.Next != nil {
		t.Errorf("List(size 4) at the horizon = %+v, %v; want 4 entries and no cursor", p, err)
	}
	// Without a horizon everything shows.
	if got := listAll(t, h, "erin", time.Time{}, 10); len(got) != 6 {
		t.Errorf("List without horizon: %d entries, want 6", len(got))
	}
	// A horizon in the future hides everything.
	if got := listAll(t, h, "erin", horizon.Add(48*time.Hour), 10); len(got) != 0 {
		t.Errorf("List with a future horizon: %+v, want nothing", got)
	}
}

func TestDeleteVideo(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	apply(t, h,
		history.NewWatch("fay", "gone", b, 1),
		history.NewWatch("fay", "gone", b.Add(time.Hour), 2), // rewatched: two versions recorded
		history.NewWatch("fay", "kept", b.Add(time.Minute), 3),
	)
	if err := h.DeleteVideo(t.Context(), "fay", "gone"); err != nil {
		t.Fatal(err)
	}
	want := []history.Entry{entry(history.NewWatch("fay", "kept", b.Add(time.Minute), 3))}
	if diff := cmp.Diff(want, listAll(t, h, "fay", time.Time{}, 10)); diff != "" {
		t.Errorf("after DeleteVideo (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "fay", want)

	// Deleting again, or a video never watched, changes nothing.
	for _, v := range []string{"gone", "never"} {
		if err := h.DeleteVideo(t.Context(), "fay", v); err != nil {
			t.Errorf("DeleteVideo(%q): %v", v, err)
		}
	}
	checkOneRowPerVideo(t, h, "fay", want)

	// Watching it again, even at an older time, records it afresh.
	again := history.NewWatch("fay", "gone", b.Add(-time.Hour), 4)
	apply(t, h, again)
	want = append(want, entry(again))
	if diff := cmp.Diff(want, listAll(t, h, "fay", time.Time{}, 10)); diff != "" {
		t.Errorf("after watching again (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "fay", want)
}

func TestDeleteBefore(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	cut := base()
	at := func(d time.Duration, v string, pos float64) history.Watch {
		return history.NewWatch("gus", v, cut.Add(d), pos)
	}
	apply(t, h,
		at(-48*time.Hour, "old", 1),
		at(-time.Millisecond, "just-before", 2),
		at(0, "at-cut", 3),
		at(time.Millisecond, "just-after", 4),
		at(-time.Hour, "rewatched", 5), at(time.Hour, "rewatched", 6), // older version below the cut
		at(-2*time.Hour, "moved-back", 7), // single watch below the cut
	)
	if err := h.DeleteBefore(t.Context(), "gus", cut); err != nil {
		t.Fatal(err)
	}
	want := []history.Entry{
		entry(at(time.Hour, "rewatched", 6)),
		entry(at(time.Millisecond, "just-after", 4)),
		entry(at(0, "at-cut", 3)), // exactly at the cut: kept
	}
	if diff := cmp.Diff(want, listAll(t, h, "gus", time.Time{}, 10)); diff != "" {
		t.Errorf("after DeleteBefore(cut) (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "gus", want)

	// A deleted video watched again at an old time is recorded afresh:
	// its latest-watch versions went with it.
	again := at(-72*time.Hour, "old", 8)
	apply(t, h, again)
	want = append(want, entry(again))
	if diff := cmp.Diff(want, listAll(t, h, "gus", time.Time{}, 10)); diff != "" {
		t.Errorf("after watching a deleted video again (-want +got):\n%s", diff)
	}

	// Zero clears everything.
	if err := h.DeleteBefore(t.Context(), "gus", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, h, "gus", time.Time{}, 10); len(got) != 0 {
		t.Errorf("after DeleteBefore(zero): %+v", got)
	}
	checkOneRowPerVideo(t, h, "gus", nil)
	// On an empty history it is a no-op.
	if err := h.DeleteBefore(t.Context(), "gus", time.Time{}); err != nil {
		t.Errorf("DeleteBefore on an empty history: %v", err)
	}
}

func TestDeleteBeforeManyEntries(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	// More than one read batch (1,000 rows) on each side of the cut, and a
	// batch boundary exactly at 1,000.
	bulkLoad(t, h, "hal", distinctWatches("hal", 2600, b))
	bulkLoad(t, h, "ida", distinctWatches("ida", 1000, b))
	cut := b.Add(-1299 * time.Millisecond) // entries 0..1299 are at or after the cut
	if err := h.DeleteBefore(t.Context(), "hal", cut); err != nil {
		t.Fatal(err)
	}
	got := listAll(t, h, "hal", time.Time{}, 100)
	if len(got) != 1300 || got[0].VideoID != "v000000" || got[len(got)-1].VideoID != "v001299" {
		t.Errorf("after DeleteBefore(cut): %d entries from %+v; want 1300 from v000000 to v001299", len(got), got[:min(1, len(got))])
	}
	if err := h.DeleteBefore(t.Context(), "ida", time.Time{}); err != nil {
		t.Fatal(err)
	}
	checkOneRowPerVideo(t, h, "ida", nil)
	if err := h.DeleteBefore(t.Context(), "hal", time.Time{}); err != nil {
		t.Fatal(err)
	}
	checkOneRowPerVideo(t, h, "hal", nil)
}

// Expire removes the entries before the horizon (and their marks) the way
// DeleteBefore does and records no deletion (that it leaves the views'
// claims is viewstore's TestClaimOutlivesExpire).
func TestExpire(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	cut := base()
	at := func(d time.Duration, v string, pos float64) history.Watch {
		return history.NewWatch("kim", v, cut.Add(d), pos)
	}
	old := at(-48*time.Hour, "old", 1)
	old.RecordedAt = old.WatchedAt // received when watched: a view
	apply(t, h,
		old,
		at(-time.Millisecond, "just-before", 2),
		at(0, "at-cut", 3),
		at(time.Millisecond, "just-after", 4),
		at(-time.Hour, "rewatched", 5), at(time.Hour, "rewatched", 6), // older version below the cut
	)
	apply(t, h, history.NewWatch("kim2", "other", cut.Add(-48*time.Hour), 1)) // another user's
	n, err := h.Expire(t.Context(), "kim", cut)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("Expire removed %d entries, want 2 (old, just-before)", n)
	}
	want := []history.Entry{
		entry(at(time.Hour, "rewatched", 6)),
		entry(at(time.Millisecond, "just-after", 4)),
		entry(at(0, "at-cut", 3)), // exactly at the horizon: kept
	}
	if diff := cmp.Diff(want, listAll(t, h, "kim", time.Time{}, 10)); diff != "" {
		t.Errorf("after Expire(cut) (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "kim", want)
	if got := listAll(t, h, "kim2", time.Time{}, 10); len(got) != 1 {
		t.Errorf("another user's history after Expire: %+v", got)
	}
	// Nothing left to expire: no entry removed.
	if n, err := h.Expire(t.Context(), "kim", cut); err != nil || n != 0 {
		t.Errorf("second Expire: %d, %v; want 0", n, err)
	}
	// No deletion is recorded: the watch applied again is listed again (a
	// read's horizon hides it, and the next Expire removes it).
	apply(t, h, old)
	if diff := cmp.Diff(append(want, entry(old)), listAll(t, h, "kim", time.Time{}, 10)); diff != "" {
		t.Errorf("an expired watch applied again (-want +got):\n%s", diff)
	}
	// A zero horizon (no auto-delete) removes nothing.
	if n, err := h.Expire(t.Context(), "kim", time.Time{}); err != nil || n != 0 {
		t.Errorf("Expire(zero): %d, %v; want 0", n, err)
	}
	if got := listAll(t, h, "kim", time.Time{}, 10); len(got) != 4 {
		t.Errorf("after Expire(zero): %d entries, want 4", len(got))
	}
}

func TestExpireManyEntries(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	bulkLoad(t, h, "lee", distinctWatches("lee", 2600, b))
	cut := b.Add(-1299 * time.Millisecond) // entries 0..1299 are at or after the cut
	n, err := h.Expire(t.Context(), "lee", cut)
	if err != nil {
		t.Fatal(err)
	}
	got := listAll(t, h, "lee", time.Time{}, 100)
	if n != 1300 || len(got) != 1300 || got[0].VideoID != "v000000" || got[len(got)-1].VideoID != "v001299" {
		t.Errorf("Expire(cut) removed %d; %d entries left; want 1300 removed and v000000..v001299 left", n, len(got))
	}
	checkOneRowPerVideo(t, h, "lee", got)
}

func TestUsersAreIsolated(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	// Ids whose raw bytes or base64 forms are prefixes of one another.
	users := []string{"a", "a#b", "a#", "12", "123", "abc", "abcd", "YQ", "/", "日本", "日本語", "\x00"}
	watchesOf := func(i int, u string) []history.Watch {
		// Every user watches the same videos, each at its own times.
		return []history.Watch{
			history.NewWatch(u, "shared", b.Add(time.Duration(i+1)*time.Minute), float64(i)),
			history.NewWatch(u, "shared", b.Add(time.Duration(i+1)*time.Minute-time.Hour), float64(i)),
			history.NewWatch(u, "mine-"+fmt.Sprint(i), b.Add(time.Duration(i)*time.Second), float64(i)),
			history.NewWatch(u, "old", b.Add(-24*time.Hour-time.Duration(i)*time.Second), float64(i)),
		}
	}
	wantOf := func(i int, u string) []history.Entry {
		ws := watchesOf(i, u)
		return []history.Entry{entry(ws[0]), entry(ws[2]), entry(ws[3])}
	}
	for i, u := range users {
		apply(t, h, watchesOf(i, u)...)
	}
	check := func(t *testing.T, skip map[string][]history.Entry) {
		t.Helper()
		for i, u := range users {
			want, changed := skip[u]
			if !changed {
				want = wantOf(i, u)
			}
			for _, size := range []int{1, 2, 10} {
				if diff := cmp.Diff(want, listAll(t, h, u, time.Time{}, size)); diff != "" {
					t.Errorf("user %q, size %d (-want +got):\n%s", u, size, diff)
				}
			}
			checkOneRowPerVideo(t, h, u, want)
		}
	}
	check(t, nil)

	// A cursor of one user used for another reads only the other's rows.
	p, err := h.List(t.Context(), "a#b", nil, time.Time{}, 1)
	if err != nil || p.Next == nil {
		t.Fatalf("List(a#b): %+v, %v", p, err)
	}
	for _, u := range []string{"a", "a#"} {
		got, err := h.List(t.Context(), u, p.Next, time.Time{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got.Entries {
			if e.VideoID == "mine-1" {
				t.Errorf("user %q read an entry of a#b through its cursor: %+v", u, got.Entries)
			}
		}
	}
	// A horizon read stays inside the user too.
	for i, u := range users {
		got, err := h.List(t.Context(), u, nil, b.Add(-time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantOf(i, u)[:2], got.Entries); diff != "" {
			t.Errorf("user %q with a horizon (-want +got):\n%s", u, diff)
		}
	}

	// Deletes by one user touch nobody else.
	if err := h.DeleteVideo(t.Context(), "a", "shared"); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteBefore(t.Context(), "12", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteBefore(t.Context(), "abc", b.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	check(t, map[string][]history.Entry{
		"a":   wantOf(0, "a")[1:],
		"12":  nil,
		"abc": wantOf(slices.Index(users, "abc"), "abc")[:2],
	})
}

func TestBackendDown(t *testing.T) {
	t.Parallel()
	h, c := newStore(t)
	c.Close()
	w := history.NewWatch("jo", "v", base(), 0)
	for name, err := range map[string]error{
		"Apply":        h.Apply(t.Context(), w),
		"DeleteVideo":  h.DeleteVideo(t.Context(), "jo", "v"),
		"DeleteBefore": h.DeleteBefore(t.Context(), "jo", time.Time{}),
		"Expire": func() error {
			_, err := h.Expire(t.Context(), "jo", base())
			return err
		}(),
		"List": func() error {
			_, err := h.List(t.Context(), "jo", nil, time.Time{}, 10)
			return err
		}(),
	} {
		if !errors.Is(err, errs.ErrBackendUnavailable) {
			t.Errorf("%s on a closed client: %v; want ErrBackendUnavailable (503)", name, err)
		}
	}
}

// TestListIsOneBoundedRead checks the request behind a page: one ReadRows
// of one range inside the user's keys, with a row limit of the page size
// plus one. Bigtable stops a scan at its row limit, so a page costs the same
// for 10 entries or 100,000 (the emulator, unlike Bigtable, collects the
// whole range before applying the limit: see BenchmarkHistoryFirstPage).
func TestListIsOneBoundedRead(t *testing.T) {
	t.Parallel()
	h, log := newLoggedStore(t)
	b := base()
	const user = "kim"
	bulkLoad(t, h, user, distinctWatches(user, 500, b))
	cursor := &history.Cursor{At: b.Add(-100 * time.Millisecond), VideoID: "v000100"}
	horizon := b.Add(-400 * time.Millisecond)
	tests := []struct {
		name       string
		after      *history.Cursor
		horizon    time.Time
		size       int
		start, end string
		wantFirst  string
	}{
		{"first page", nil, time.Time{}, 10, history.UserPrefix(user), history.UserEnd(user), "v000000"},
		{"next page", cursor, time.Time{}, 10, cursor.StartKey(user), history.UserEnd(user), "v000101"},
		{"horizon", nil, horizon, 100, history.UserPrefix(user), history.HorizonKey(user, horizon), "v000000"},
		{"next page and horizon", cursor, horizon, 1, cursor.StartKey(user), history.HorizonKey(user, horizon), "v000101"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log.reset()
			p, err := h.List(t.Context(), user, tc.after, tc.horizon, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Entries) != tc.size || p.Entries[0].VideoID != tc.wantFirst || p.Next == nil {
				t.Fatalf("page: %d entries from %+v, next %+v", len(p.Entries), p.Entries[:min(1, len(p.Entries))], p.Next)
			}
			reqs, rows := log.reset()
			if len(reqs) != 1 {
				t.Fatalf("List sent %d ReadRows requests, want 1: %v", len(reqs), reqs)
			}
			req := reqs[0]
			if req.GetRowsLimit() != int64(tc.size+1) {
				t.Errorf("rows limit %d, want %d", req.GetRowsLimit(), tc.size+1)
			}
			rs := req.GetRows()
			if len(rs.GetRowKeys()) != 0 || len(rs.GetRowRanges()) != 1 {
				t.Fatalf("row set %v, want one range", rs)
			}
			r := rs.GetRowRanges()[0]
			if got := string(r.GetStartKeyClosed()); got != tc.start {
				t.Errorf("range start %q, want %q (closed)", got, tc.start)
			}
			if got := string(r.GetEndKeyOpen()); got != tc.end {
				t.Errorf("range end %q, want %q (open)", got, tc.end)
			}
			if rows > tc.size+1 {
				t.Errorf("received %d rows for a page of %d", rows, tc.size)
			}
		})
	}
}

// TestTableRetention checks the table-level GC max age that removes old
// watches for good (HISTORY_MAX_AGE_DAYS, 36 months by default; one day
// here): both tables carry the policy, and the emulator's collector removes
// a watch older than it.
func TestTableRetention(t *testing.T) {
	t.Parallel()
	cfg := emulatortest.New(t, emulatortest.WithHistoryMaxAgeDays(1))
	c := emulatortest.Bigtable(t, cfg)
	ac, err := bigtable.NewAdminClient(t.Context(), cfg.Project, cfg.Bigtable.Instance)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ac.Close() })
	wantFamilies := map[string][]string{
		EntriesTable: {entriesFamily + ": age() > 1d"},
		LatestTable:  {LatestFamily + ": age() > 1d", PendingFamily + ": age() > 15d"}, // x: fixed, not the history's
	}
	for table, family := range map[string]string{EntriesTable: entriesFamily, LatestTable: LatestFamily} {
		info, err := ac.TableInfo(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		var policies []string
		for _, f := range info.FamilyInfos {
			policies = append(policies, f.Name+": "+f.GCPolicy)
		}
		slices.Sort(policies)
		if !slices.Equal(policies, wantFamilies[table]) {
			t.Errorf("table %s: families %q, want %q", table, policies, wantFamilies[table])
		}
		// The emulator starts collecting only after a family's GC rule is
		// modified (bttest's needGC), never for rules given at table
		// creation: set the same rule again to start it.
		if err := ac.SetGCPolicy(t.Context(), table, family, bigtable.MaxAgePolicy(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}

	h := New(c)
	now := time.Now().UTC().Truncate(time.Millisecond)
	old := history.NewWatch("lou", "old", now.Add(-49*time.Hour), 1)
	recent := history.NewWatch("lou", "recent", now.Add(-time.Hour), 2)
	apply(t, h, old, recent)
	want := []history.Entry{entry(recent)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := listAll(t, h, "lou", time.Time{}, 10)
		if cmp.Equal(want, got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after writing, a watch older than the max age is still listed: %+v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkOneRowPerVideo(t, h, "lou", want)
}

// Deleting a video the user has no row of writes its mark in PendingFamily
// only, whose cells live as long as an accepted watch can still arrive, not
// as long as the history.
func TestDeleteVideoNeverWatchedMarksOnlyWhilePending(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	apply(t, h, history.NewWatch("gil", "seen", base(), 1))
	for _, v := range []string{"never", "other-never"} {
		for range 2 { // a second deletion finds only the pending mark
			if err := h.DeleteVideo(t.Context(), "gil", v); err != nil {
				t.Fatalf("DeleteVideo(%q): %v", v, err)
			}
		}
		row, err := h.latest.ReadRow(t.Context(), history.LatestKey("gil", v))
		if err != nil {
			t.Fatal(err)
		}
		if len(row[LatestFamily]) != 0 || len(row[PendingFamily]) != 2 {
			t.Errorf("DeleteVideo(%q) of a video never watched wrote %v; want two marks in %q only", v, row, PendingFamily)
		}
	}
	// A watched one is deleted with its mark among the history's.
	if err := h.DeleteVideo(t.Context(), "gil", "seen"); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, h, "gil", time.Time{}, 10); len(got) != 0 {
		t.Errorf("after deleting the one video: %+v", got)
	}
	row, err := h.latest.ReadRow(t.Context(), history.LatestKey("gil", "seen"))
	if err != nil || len(row[LatestFamily]) != 1 || len(row[PendingFamily]) != 0 {
		t.Errorf("marks of the watched video: %v, %v; want one in %q", row, err, LatestFamily)
	}
}

// PendingFamily's GC keeps a mark while a watch accepted before it can
// still be delivered: its subscription's retention, then its dead-letter
// subscription's, and no longer than the history.
func TestPendingMarksOutliveDelivery(t *testing.T) {
	top, err := topology.Load()
	if err != nil {
		t.Fatal(err)
	}
	var pending, kept time.Duration
	for _, tb := range top.Bigtable.Tables {
		if tb.Name != LatestTable {
			continue
		}
		for _, f := range tb.Families {
			age, fixed, err := f.FixedMaxAge()
			if err != nil {
				t.Fatal(err)
			}
			if !fixed {
				age = time.Duration(top.Bigtable.Defaults[f.MaxAgeDaysVar]) * 24 * time.Hour
			}
			switch f.Name {
			case PendingFamily:
				pending = age
			case LatestFamily:
				kept = age
			}
		}
	}
	delivery := 2 * time.Duration(top.PubSub.Delivery.MessageRetentionSeconds) * time.Second
	if pending < delivery || pending >= kept {
		t.Errorf("%s/%s max age %v: want at least %v (retention and dead-letter retention) and under the history's %v",
			LatestTable, PendingFamily, pending, delivery, kept)
	}
}

// A watch accepted before the user deleted its video, and first delivered
// after, does not bring the video back, though the deletion found no row.
func TestFirstDeliveryAfterDeleteStaysDeleted(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	inFlight := history.NewWatch("dora", "v1", b, 1)
	if err := h.DeleteVideo(t.Context(), "dora", "v1"); err != nil {
		t.Fatal(err)
	}
	apply(t, h, inFlight)
	apply(t, h, inFlight) // and its redelivery
	if got := listAll(t, h, "dora", time.Time{}, 10); len(got) != 0 {
		t.Errorf("a watch accepted before the deletion is listed after it: %+v", got)
	}
	again := history.NewWatch("dora", "v1", b, 2) // recorded after the deletion
	apply(t, h, again)
	if diff := cmp.Diff([]history.Entry{entry(again)}, listAll(t, h, "dora", time.Time{}, 10)); diff != "" {
		t.Errorf("a watch recorded after the deletion (-want +got):\n%s", diff)
	}
}

// A watch still in flight when the user deletes the video, or clears the
// history, must not bring the video back when it is delivered late.
func TestLateDeliveryAfterDeleteStaysDeleted(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	b := base()
	inFlight := history.NewWatch("carol", "v1", b, 1)
	other := history.NewWatch("carol", "v2", b.Add(time.Minute), 2)
	apply(t, h, inFlight, other)

	if err := h.DeleteVideo(context.Background(), "carol", "v1"); err != nil {
		t.Fatal(err)
	}
	apply(t, h, inFlight) // the redelivery
	want := []history.Entry{entry(other)}
	if diff := cmp.Diff(want, listAll(t, h, "carol", time.Time{}, 10)); diff != "" {
		t.Errorf("after DeleteVideo and a late delivery (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "carol", want)

	// A new watch after the deletion is history again.
	again := history.NewWatch("carol", "v1", b.Add(-time.Hour), 3) // recorded now, of an old watch
	apply(t, h, again)
	want = []history.Entry{entry(other), entry(again)}
	if diff := cmp.Diff(want, listAll(t, h, "carol", time.Time{}, 10)); diff != "" {
		t.Errorf("a watch after the deletion (-want +got):\n%s", diff)
	}

	if err := h.DeleteBefore(context.Background(), "carol", time.Time{}); err != nil {
		t.Fatal(err)
	}
	apply(t, h, other, again)
	if got := listAll(t, h, "carol", time.Time{}, 10); len(got) != 0 {
		t.Errorf("after clearing and late deliveries: %+v", got)
	}

	// Clearing before a time keeps later watches, and a late delivery of an
	// earlier one stays cleared.
	early, late := history.NewWatch("carol", "v3", b, 0), history.NewWatch("carol", "v4", b.Add(time.Hour), 0)
	apply(t, h, early, late)
	if err := h.DeleteBefore(context.Background(), "carol", b.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	apply(t, h, early)
	want = []history.Entry{entry(late)}
	if diff := cmp.Diff(want, listAll(t, h, "carol", time.Time{}, 10)); diff != "" {
		t.Errorf("after DeleteBefore and a late delivery (-want +got):\n%s", diff)
	}
}

// A watch accepted before a clear whose first delivery wrote its entry and
// mark and then failed (Bigtable frozen) is no newer watch to a watch of the
// same video accepted after the clear: the later watch stays, at an older
// watch time, whichever application removes the stale one.
func TestWatchAfterClearOutlivesACoveredNewerOne(t *testing.T) {
	t.Parallel()
	h, _ := newStore(t)
	ctx := context.Background()
	b := base()
	inFlight := history.NewWatch("erin", "v1", b.Add(2*time.Hour), 1)
	inFlight.RecordedAt = time.Now().UTC().Add(-time.Second) // accepted before the clear
	if err := h.DeleteBefore(ctx, "erin", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := h.write(ctx, inFlight); err != nil { // its delivery stops halfway
		t.Fatal(err)
	}
	after := history.NewWatch("erin", "v1", b, 2)
	after.RecordedAt = time.Now().UTC().Add(time.Second) // accepted after the clear
	apply(t, h, after)
	want := []history.Entry{entry(after)}
	if diff := cmp.Diff(want, listAll(t, h, "erin", time.Time{}, 10)); diff != "" {
		t.Errorf("a watch after the clear beside a half-applied covered one (-want +got):\n%s", diff)
	}
	apply(t, h, inFlight) // the redelivery
	if diff := cmp.Diff(want, listAll(t, h, "erin", time.Time{}, 10)); diff != "" {
		t.Errorf("after the covered watch's redelivery (-want +got):\n%s", diff)
	}
	checkOneRowPerVideo(t, h, "erin", want)
}
