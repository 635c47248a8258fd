package reactionstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
)

// truths reads, at one timestamp, what reconciliation takes as each item's
// truth (the tallies), and the two recounts of the rows: those the tallies
// hold, and those of accounts not flagged.
func (w *world) truths(t *testing.T, items []string) (tally, tallied, unflagged map[string]counter.Values) {
	t.Helper()
	err := w.db.InSnapshot(context.Background(), func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		var err error
		if tally, err = (reactionstore.Source{}).Truth(ctx, tx, items); err != nil {
			return err
		}
		if tallied, err = reactionstore.RecountTallied(ctx, tx, items); err != nil {
			return err
		}
		unflagged, err = reactionstore.Recount(ctx, tx, items)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tally, tallied, unflagged
}

// TestTallyExactThroughFlags: random reactions, undos and flag changes of
// a few accounts on a few items. The tallies hold exactly the rows they
// say they hold at every step; once the flag changes are applied (by runs
// cut short again and again, then resumed), they equal the recount of the
// accounts not flagged.
func TestTallyExactThroughFlags(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(26, 1))
	items := []string{"i0", "i1", "i2", "i3"}
	kinds := []reaction.Kind{reaction.Like, reaction.Dislike, reaction.None}
	users := make([]string, 12)
	for i := range users {
		users[i] = fmt.Sprintf("u%d", i)
	}
	check := func(step int) {
		t.Helper()
		tally, tallied, _ := w.truths(t, items)
		if d := cmp.Diff(tallied, tally); d != "" {
			t.Fatalf("step %d: tallies differ from the rows they hold (-rows +tally):\n%s", step, d)
		}
	}
	for step := range 100 {
		switch r := rng.IntN(20); {
		case r == 0:
			if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{users[rng.IntN(len(users))], users[rng.IntN(len(users))]}, Flagged: rng.IntN(2) == 0}); err != nil {
				t.Fatal(err)
			}
		case r == 1:
			// A run cut short: at most a transaction or two.
			if _, err := w.rs.ApplyFlags(ctx, time.Now().Add(time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		default:
			w.set(t, users[rng.IntN(len(users))], items[rng.IntN(len(items))], kinds[rng.IntN(len(kinds))])
		}
		if step%25 == 0 {
			check(step)
		}
	}
	check(100)
	flagged := 0
	for _, u := range users[:6] {
		if n, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{u}, Flagged: u != "u0"}); err == nil {
			flagged += n
		}
	}
	runs := 0
	for {
		runs++
		rep, err := w.rs.ApplyFlags(ctx, time.Now().Add(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		check(100 + runs)
		if rep.Done {
			break
		}
		if runs > 200 {
			t.Fatal("applying the flags does not finish")
		}
	}
	tally, _, unflagged := w.truths(t, items)
	if d := cmp.Diff(unflagged, tally); d != "" {
		t.Fatalf("after %d runs applying the flags: tallies differ from the accounts not flagged (-rows +tally):\n%s", runs, d)
	}
	if rep, err := w.rs.ApplyFlags(ctx, time.Time{}); err != nil || !rep.Done || rep.Moved != 0 {
		t.Fatalf("applying again: %+v, %v; want nothing moved", rep, err)
	}
	t.Logf("%d flag changes applied in %d runs", flagged, runs)
}

// TestDailyRunRepairsTally: a tally that drifted from its rows is what the
// hourly run trusts, so the daily run recounts the rows, repairs the tally
// once and corrects the counter, in the slice's transaction.
func TestDailyRunRepairsTally(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	for _, u := range []string{"a", "b", "c"} {
		w.set(t, u, "v", reaction.Like)
	}
	w.deliver(t, w.pub.Take())
	// Two likes too many on one of the tally's shards.
	if _, err := w.db.Client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("ReactionTallies",
		[]string{"ContentId", "Shard", "Likes", "Dislikes"}, []any{"v", int64(70), int64(2), int64(0)})}); err != nil {
		t.Fatal(err)
	}
	tally, tallied, _ := w.truths(t, []string{"v"})
	if tally["v"] != likes(5, 0) || tallied["v"] != likes(3, 0) {
		t.Fatalf("drift not injected: tally %+v, rows %+v", tally["v"], tallied["v"])
	}
	if rep := w.reconcile(t, reconcilestore.Recent); rep.Corrected != 1 || w.counted(t, "v") != likes(5, 0) {
		t.Fatalf("the hourly run trusts the tally: %+v, counted %+v", rep, w.counted(t, "v"))
	}
	rep := w.reconcile(t, reconcilestore.All)
	if rep.Repaired != 1 || rep.Corrected != 1 {
		t.Fatalf("daily run: %+v; want the tally repaired and the counter corrected", rep)
	}
	tally, tallied, _ = w.truths(t, []string{"v"})
	if tally["v"] != likes(3, 0) || tallied["v"] != likes(3, 0) || w.counted(t, "v") != likes(3, 0) {
		t.Fatalf("after the daily run: tally %+v, rows %+v, counted %+v; want 3 likes", tally["v"], tallied["v"], w.counted(t, "v"))
	}
	if rep := w.reconcile(t, reconcilestore.All); rep.Repaired != 0 || rep.Corrected != 0 {
		t.Fatalf("second daily run: %+v; want nothing to repair", rep)
	}
	if rep := w.reconcile(t, reconcilestore.Recent); rep.Corrected != 0 {
		t.Fatalf("hourly run after the repair: %+v; want nothing to correct", rep)
	}
}

// TestTallyOfItemWithOlderRows: an item with rows that predate the tallies
// has no complete tally, whatever is written since: its truth is recounted
// from the rows.
func TestTallyOfItemWithOlderRows(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	if _, err := w.db.Client.Apply(ctx, []*spanner.Mutation{spanner.Insert("Reactions",
		[]string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime"},
		[]any{"old", "v", "like", int64(1), int64(7), spanner.CommitTimestamp})}); err != nil {
		t.Fatal(err)
	}
	w.set(t, "new", "v", reaction.Like)
	w.set(t, "new", "w", reaction.Dislike)
	tally, tallied, unflagged := w.truths(t, []string{"v", "w"})
	want := map[string]counter.Values{"v": likes(2, 0), "w": likes(0, 1)}
	if d := cmp.Diff(want, tally); d != "" {
		t.Errorf("truth (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, unflagged); d != "" {
		t.Errorf("recount (-want +got):\n%s", d)
	}
	if tallied["v"] != likes(1, 0) {
		t.Errorf("v's tallied rows: %+v; want the new like only", tallied["v"])
	}
}

// TestTallyBaseLookupReadsByKey: a write to an item without a base row
// looks for rows that predate the tallies by key, not by SQL (the emulator
// runs every SQL query as a scan of its tables, and the writers ask it inside
// their transaction), and still tells an item with such a row (no base row
// written) from one without (base row written).
func TestTallyBaseLookupReadsByKey(t *testing.T) {
	ctx := context.Background()
	db, sql := emulatortest.SpannerCountingSQL(t, emulatortest.New(t))
	if _, err := db.Client.Apply(ctx, []*spanner.Mutation{spanner.Insert("Reactions",
		[]string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime", "Tallied"},
		[]any{"a", "old", "like", int64(1), int64(7), spanner.CommitTimestamp, true}), spanner.Insert("Reactions",
		[]string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime"},
		[]any{"b", "old", "dislike", int64(1), int64(7), spanner.CommitTimestamp})}); err != nil {
		t.Fatal(err)
	}
	writer := reactionstore.NewWriter(reactionstore.New(db), &pushtest.Events{}, reactionstore.WriterOptions{Batched: true, MaxInFlight: 1})
	before := sql.Load()
	for _, id := range []string{"old", "new"} {
		res, err := writer.Set(ctx, reactionstore.SetRequest{UserID: "u", ContentID: id, To: reaction.Like})
		if err == nil {
			err = res.Err
		}
		if err != nil {
			t.Fatalf("set %s: %v", id, err)
		}
	}
	if n := sql.Load() - before; n != 0 {
		t.Errorf("the writes sent %d SQL statements, want none (reads by key)", n)
	}
	based := map[string]bool{}
	err := db.Client.Single().Read(ctx, "ReactionTallies", spanner.KeySetFromKeys(spanner.Key{"old", int64(-1)}, spanner.Key{"new", int64(-1)}), []string{"ContentId"}).Do(func(r *spanner.Row) error {
		var id string
		if err := r.Columns(&id); err != nil {
			return err
		}
		based[id] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"new": true}; !cmp.Equal(want, based) {
		t.Errorf("items with a base row: %v; want %v", based, want)
	}
}
