package reactionstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction"
)

func group(ev moderation.Evidence, members ...string) moderation.Group {
	return moderation.Group{Members: members, Evidence: ev}
}

func listAll(t *testing.T, rs *moderationstore.Store, pageSize int) []moderation.Flag {
	t.Helper()
	var out []moderation.Flag
	var cur *moderation.Cursor
	for pages := 0; ; pages++ {
		page, next, err := rs.ListFlagged(context.Background(), cur, pageSize)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > pageSize || (next != nil && len(page) != pageSize) {
			t.Fatalf("page of %d with next %v, page size %d", len(page), next, pageSize)
		}
		out = append(out, page...)
		if next == nil {
			return out
		}
		if pages > 100 {
			t.Fatal("listing does not end")
		}
		cur = next
	}
}

func TestAutomaticFlagsCountLikeAModeratorsAndStopAtHisDecision(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	for _, u := range []string{"bot1", "bot2", "bot3", "human"} {
		w.set(t, u, "v", reaction.Like)
	}
	w.deliver(t, w.pub.Take())
	// A moderator already cleared bot3 (never flagged): the job leaves it.
	if n, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"bot3"}, Flagged: false}); err != nil || n != 0 {
		t.Fatalf("clearing an unflagged account: %d %v", n, err)
	}
	ev := moderation.Evidence{Items: []moderation.Item{{ContentID: "v", Reaction: "like"}}, GroupSize: 3,
		WindowStart: time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), WindowEnd: time.Date(2026, 12, 1, 1, 5, 0, 0, time.UTC)}
	t1 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	n, err := w.mod.FlagGroups(ctx, []moderation.Group{group(ev, "bot1", "bot2", "bot3")}, "detect", time.Time{}, t1)
	if err != nil || n != 2 {
		t.Fatalf("FlagGroups: %d %v, want bot1 and bot2", n, err)
	}
	if wm, err := w.mod.Watermark(ctx, "detect"); err != nil || !wm.Equal(t1) {
		t.Fatalf("watermark %v %v, want %v", wm, err, t1)
	}
	// A run that read the old watermark records nothing.
	if _, err := w.mod.FlagGroups(ctx, []moderation.Group{group(ev, "human")}, "detect", time.Time{}, t1.Add(time.Hour)); !errors.Is(err, moderationstore.ErrWatermarkMoved) {
		t.Fatalf("stale run: %v, want ErrWatermarkMoved", err)
	}
	// Their likes stop counting by the next reconciliation, as a moderator's flag.
	w.reconcile(t, reconcilestore.Recent)
	if got := w.counted(t, "v"); got != likes(2, 0) {
		t.Fatalf("after automatic flags: %+v, want human's and bot3's likes", got)
	}
	flags := listAll(t, w.mod, 1)
	if len(flags) != 2 || flags[0].Reason != moderation.Automatic || flags[0].Evidence == nil ||
		flags[0].Evidence.GroupSize != 3 || !flags[0].Evidence.WindowEnd.Equal(ev.WindowEnd) || flags[0].FlaggedAt.IsZero() {
		t.Fatalf("listing: %+v", flags)
	}
	// A moderator unflags bot1: counted again, and the next run's same
	// evidence does not flag it again.
	if n, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"bot1"}, Flagged: false}); err != nil || n != 1 {
		t.Fatalf("unflag: %d %v", n, err)
	}
	n, err = w.mod.FlagGroups(ctx, []moderation.Group{group(ev, "bot1", "bot2", "bot3")}, "detect", t1, t1.Add(time.Hour))
	if err != nil || n != 0 {
		t.Fatalf("second run: %d %v, want nothing flagged", n, err)
	}
	w.reconcile(t, reconcilestore.Recent)
	if got := w.counted(t, "v"); got != likes(3, 0) {
		t.Fatalf("after the unflag: %+v", got)
	}
	flags = listAll(t, w.mod, 10)
	if len(flags) != 1 || flags[0].UserID != "bot2" {
		t.Fatalf("listing after the unflag: %+v", flags)
	}
}

func TestChangedAndFirstSeen(t *testing.T) {
	w := newWorld(t, worldOpts{})
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)
	w.set(t, "u1", "a", reaction.Like)
	w.set(t, "u2", "a", reaction.Dislike)
	first, err := w.rs.FirstSeen(ctx, []string{"u1", "u2", "nobody"})
	if err != nil || len(first) != 2 || first["u1"].Before(before) {
		t.Fatalf("first seen: %v %v", first, err)
	}
	// A change of an existing row keeps its creation time.
	w.set(t, "u1", "a", reaction.Dislike)
	w.set(t, "u1", "b", reaction.Like)
	again, err := w.rs.FirstSeen(ctx, []string{"u1"})
	if err != nil || !again["u1"].Equal(first["u1"]) {
		t.Fatalf("first seen after changes: %v (was %v) %v", again["u1"], first["u1"], err)
	}
	// A row older than the column makes the account established (left out).
	if _, err := w.db.Client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Reactions",
		[]string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime"},
		[]any{"u2", "old", "like", int64(1), int64(7), time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)})}); err != nil {
		t.Fatal(err)
	}
	if f, err := w.rs.FirstSeen(ctx, []string{"u2"}); err != nil || len(f) != 0 {
		t.Fatalf("account with a row older than CreateTime: %v %v", f, err)
	}
	after := time.Now().Add(time.Minute)
	changed := func(from, to time.Time, lo, hi int) []string {
		t.Helper()
		scan := moderation.Params{MinGroup: 1}.NewScan(from, to)
		if err := w.rs.ScanParts(ctx, lo, hi, from, to, scan); err != nil {
			t.Fatal(err)
		}
		part, _ := scan.Finish()
		var got []string
		for _, r := range part.Candidates {
			got = append(got, r.UserID+"/"+r.ContentID+"/"+r.Reaction)
		}
		slices.Sort(got)
		if part.Rows != len(got) {
			t.Fatalf("%d rows scanned, %d kept", part.Rows, len(got))
		}
		return got
	}
	if got, want := changed(before, after, 0, moderation.Parts), []string{"u1/a/dislike", "u1/b/like", "u2/a/dislike"}; !slices.Equal(got, want) {
		t.Fatalf("changed: %v, want %v", got, want)
	}
	// The parts split the items: every reaction is in exactly one half.
	lo, hi := changed(before, after, 0, moderation.Parts/2), changed(before, after, moderation.Parts/2, moderation.Parts)
	if len(lo)+len(hi) != 3 {
		t.Fatalf("halves %v and %v", lo, hi)
	}
	if got := changed(after, after.Add(time.Hour), 0, moderation.Parts); len(got) != 0 {
		t.Fatalf("empty range: %v", got)
	}
}
