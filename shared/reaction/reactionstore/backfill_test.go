package reactionstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
)

// shardSums sums every item's tally rows, complete or not.
func (w *world) shardSums(t *testing.T) map[string]counter.Values {
	t.Helper()
	out := map[string]counter.Values{}
	err := w.db.Single().Query(context.Background(), spanner.Statement{
		SQL: `SELECT ContentId, SUM(Likes), SUM(Dislikes) FROM ReactionTallies GROUP BY ContentId`,
	}).Do(func(r *spanner.Row) error {
		var k string
		var v counter.Values
		if err := r.Columns(&k, &v.Likes, &v.Dislikes); err != nil {
			return err
		}
		if !v.IsZero() {
			out[k] = v
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// untallied counts the reaction rows that predate the tallies.
func (w *world) untallied(t *testing.T) int64 {
	t.Helper()
	var n int64
	err := w.db.Single().Query(context.Background(), spanner.Statement{SQL: `SELECT COUNT(*) FROM Reactions WHERE Tallied IS NULL`}).
		Do(func(r *spanner.Row) error { return r.Columns(&n) })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBackfillTallies: a database whose reaction rows predate the tallies
// (Tallied NULL), some of flagged accounts, beside rows written since. The
// backfill, cut short after every transaction and resumed, while accounts
// change their reactions and flags in between, keeps every tally equal to
// the rows it holds at each step; at the end every item's tally is
// complete and equals the accounts not flagged, nothing is left NULL, and
// a reconciliation of every counter agrees with the hourly one.
func TestBackfillTallies(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	defer reactionstore.SetBackfillBatch(3)()

	// Rows as they were written before the tallies.
	items := []string{"old-a", "old-b", "old-c", "mixed"}
	var ms []*spanner.Mutation
	for i, item := range items {
		for j := range 4 + 3*i {
			kind := reaction.Like
			if j%3 == 2 {
				kind = reaction.Dislike
			}
			ms = append(ms, spanner.Insert("Reactions",
				[]string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime"},
				[]any{fmt.Sprintf("u%02d", j), item, string(kind), int64(1), int64(100 + j), spanner.CommitTimestamp}))
		}
	}
	if _, err := w.db.Client.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	// Since the tallies: new rows on an old item and on a new one, and an
	// account flagged (its old rows predate the flag).
	w.set(t, "new-1", "mixed", reaction.Like)
	w.set(t, "new-1", "new", reaction.Dislike)
	if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"u01"}, Flagged: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.ApplyFlags(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	all := append(items, "new")
	check := func(step int) {
		t.Helper()
		_, tallied, _ := w.truths(t, all)
		if d := cmp.Diff(tallied, w.shardSums(t)); d != "" {
			t.Fatalf("step %d: tallies differ from the rows they hold (-rows +tally):\n%s", step, d)
		}
	}
	check(0)

	var total reactionstore.BackfillReport
	for step := 1; ; step++ {
		if step > 100 {
			t.Fatal("the backfill does not finish")
		}
		// One transaction a call: the bound is already past.
		rep, err := w.rs.BackfillTallies(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: %+v", step, rep)
		total.Items += rep.Items
		total.Moved += rep.Moved
		check(step)
		if rep.Done {
			break
		}
		switch step {
		case 2: // an old row changed: it is tallied from then on
			w.set(t, "u05", "old-c", reaction.Dislike)
		case 4: // an old row taken back
			w.set(t, "u00", "old-c", reaction.None)
		case 5: // an account flagged while its old rows wait
			if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"u07"}, Flagged: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := w.rs.ApplyFlags(ctx, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		check(step)
	}
	if n := w.untallied(t); n != 0 {
		t.Errorf("%d rows still predate the tallies", n)
	}
	if total.Items != len(items) {
		t.Errorf("completed %d items' tallies, want %d: %+v", total.Items, len(items), total)
	}
	// Every tally is complete now (Truth reads it rather than the rows),
	// and it is the accounts not flagged.
	tally, _, unflagged := w.truths(t, all)
	if d := cmp.Diff(unflagged, tally); d != "" {
		t.Errorf("tallies after the backfill (-rows of accounts not flagged +tally):\n%s", d)
	}
	if d := cmp.Diff(unflagged, w.shardSums(t)); d != "" {
		t.Errorf("tally rows after the backfill (-rows of accounts not flagged +tally rows):\n%s", d)
	}
	if rep, err := w.rs.BackfillTallies(ctx, time.Time{}); err != nil || rep != (reactionstore.BackfillReport{Done: true}) {
		t.Errorf("backfill again: %+v, %v; want done with nothing to do", rep, err)
	}
	// The counters: the daily run corrects them to the rows, the hourly
	// run (which reads the tallies) agrees.
	w.deliver(t, w.pub.Take())
	w.reconcile(t, reconcilestore.All)
	for _, k := range all {
		if got := w.counted(t, k); got != unflagged[k] {
			t.Errorf("%s counted %+v after the daily run, want %+v", k, got, unflagged[k])
		}
	}
	if rep := w.reconcile(t, reconcilestore.Recent); rep.Corrected != 0 {
		t.Errorf("hourly run after the backfill and the daily run: %+v; want nothing to correct", rep)
	}
}
