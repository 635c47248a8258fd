package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	reconcilefn "github.com/videngage/engagement/functions/reconcile"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/spannerdb"
)

// reconcileRun is one reconciliation run's figures.
type reconcileRun struct {
	name               string
	st                 reconcilestore.RunStatus
	invocations, kills int
	took               time.Duration
	work               otelcount.Spanner
}

// corpus is the generated data: counters, reaction rows and their tallies.
type corpus struct {
	counters, items, rows, moved int
	// hotRows are the hot item's rows; movedRows the rows of the items whose
	// truth moved this hour (what the hourly pass used to count).
	hotRows, movedRows int
	// drift are the counters that count a like too many.
	drift []string
}

// rowsOf is how many reaction rows item i gets: the first a fifth of them,
// the others an even share.
func rowsOf(i, items, rows int) int {
	hot := rows / 5
	if i == 0 {
		return hot
	}
	n := (rows - hot) / (items - 1)
	if i == items-1 {
		n += (rows - hot) % (items - 1)
	}
	return n
}

// generate writes o.counters counters, the first o.items of them items with
// reactions (o.reactions rows in all, each a like, with a complete tally),
// every o.recentEvery-th counter's truth moved this hour, and o.drift of
// them a like too many.
func generate(ctx context.Context, db *spannerdb.DB, o options) (corpus, error) {
	c := corpus{counters: o.counters, items: min(o.counters/2, max(o.reactions/10, 1)), rows: o.reactions}
	hour := time.Now().UTC().Truncate(time.Hour)
	step := o.counters / o.drift
	drifted := func(i int) bool { return i%step == 0 && i/step < o.drift }
	likes := func(i int) int64 {
		if i < c.items {
			return int64(rowsOf(i, c.items, c.rows))
		}
		return 0
	}
	if _, err := write(ctx, db, o.counters, genBatch, func(i int) []*spanner.Mutation {
		k := keyOf("c", i)
		n := likes(i)
		if drifted(i) {
			n++
			c.drift = append(c.drift, k)
		}
		cols, vals := []string{"CounterKey", "Shards", "Likes"}, []any{k, int64(counter.MinShards), n}
		if i%o.recentEvery == 0 {
			cols, vals = append(cols, "TruthHour"), append(vals, hour)
			c.moved++
			if i < c.items {
				c.movedRows += int(likes(i))
			}
		}
		ms := []*spanner.Mutation{spanner.InsertOrUpdate("Counters", cols, vals)}
		if i < c.items {
			ms = append(ms,
				spanner.InsertOrUpdate("ReactionTallies", []string{"ContentId", "Shard", "Likes"}, []any{k, int64(-1), int64(0)}),
				spanner.InsertOrUpdate("ReactionTallies", []string{"ContentId", "Shard", "Likes"}, []any{k, int64(i % 64), n - b2i(drifted(i))}))
		}
		return ms
	}); err != nil {
		return c, err
	}
	c.hotRows = rowsOf(0, c.items, c.rows)
	// The reaction rows, item by item.
	var pairs [][2]int
	for i := range c.items {
		for j := range rowsOf(i, c.items, c.rows) {
			pairs = append(pairs, [2]int{i, j})
		}
	}
	started := time.Now()
	if _, err := write(ctx, db, len(pairs), genBatch, func(p int) []*spanner.Mutation {
		if p%20000 == 0 && p > 0 {
			fmt.Fprintf(os.Stderr, "benchjobs: %d of %d reaction rows in %.0f s\n", p, len(pairs), time.Since(started).Seconds())
		}
		i, j := pairs[p][0], pairs[p][1]
		return []*spanner.Mutation{spanner.InsertOrUpdate("Reactions",
			[]string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime", "Tallied"},
			[]any{fmt.Sprintf("u%07d", j), keyOf("c", i), "like", int64(1), int64(1), spanner.CommitTimestamp, true})}
	}); err != nil {
		return c, err
	}
	return c, nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// runRecon works a run with invocations bounded by o.budget until it is
// done; with kill > 0, each invocation is killed at a random moment before
// kill.
func runRecon(ctx context.Context, cs *reconcilestore.Store, o options, name string, start func(context.Context) (string, error), kill time.Duration) (reconcileRun, error) {
	r := reconcileRun{name: name}
	sources := reconcilefn.Sources()
	before := otelcount.Global().Spanner()
	started := time.Now()
	id, err := start(ctx)
	if err != nil {
		return r, err
	}
	quiet := spannerdb.Uncounted(ctx)
	for {
		st, err := cs.Run(quiet, id)
		if err != nil {
			return r, err
		}
		if st.Done() {
			r.st, r.took, r.work = st, time.Since(started), otelcount.Global().Spanner().Minus(before)
			return r, nil
		}
		fmt.Fprintf(os.Stderr, "benchjobs: %s: %d invocations, %d checked in %.0f s\n", name, r.invocations, st.Checked, time.Since(started).Seconds())
		r.invocations++
		ictx, cancel := context.WithCancel(ctx)
		if kill > 0 {
			// Killed at a random moment, mid-batch or not.
			time.AfterFunc(time.Duration(rand.Int64N(int64(kill))), cancel)
		}
		_, err = cs.WorkSlices(ictx, sources, reconcilestore.WorkOptions{Run: id, Until: time.Now().Add(o.budget)})
		if ictx.Err() != nil {
			r.kills++
		} else if err != nil {
			cancel()
			return r, err
		}
		cancel()
	}
}

func benchReconcile(ctx context.Context, db *spannerdb.DB, cs *reconcilestore.Store, o options) error {
	stamp := benchreport.Start(fmt.Sprintf("go run ./cmd/benchjobs -moved 0 -counters %d -reactions %d -recent-every %d -drift %d -slices %d -budget %v -reconcile-out %s",
		o.counters, o.reactions, o.recentEvery, o.drift, o.slices, o.budget, o.out))
	fmt.Printf("2. Reconciliation: %d counters, %d reaction rows, every %d-th counter's truth moved this hour; %d slices; invocations of ≤ %v, 4 workers each\n\n",
		o.counters, o.reactions, o.recentEvery, o.slices, o.budget)
	genStart := time.Now()
	c, err := generate(spannerdb.Uncounted(ctx), db, o)
	if err != nil {
		return err
	}
	gen := time.Since(genStart)
	fmt.Printf("   generated in %.1f s: %d items with reactions (the hot one %d rows), %d counters moved this hour (%d reaction rows)\n",
		gen.Seconds(), c.items, c.hotRows, c.moved, c.movedRows)

	movedDrift := 0
	for i := range c.drift {
		if (i*(o.counters/o.drift))%o.recentEvery == 0 {
			movedDrift++
		}
	}
	hourly := func(ctx context.Context) (string, error) { return cs.StartRecentRun(ctx, o.slices) }
	daily := func(ctx context.Context) (string, error) { return cs.StartRun(ctx, o.slices) }
	var runs []reconcileRun
	check := func(r reconcileRun, err error, checked, corrected int) error {
		if err != nil {
			return err
		}
		runs = append(runs, r)
		fmt.Printf("   %-26s %7.1f s  %4d invocations (%d killed)  %6d batches  %8d checked  %5d corrected  %5d read calls  %5d commits  %7d row writes\n",
			r.name, r.took.Seconds(), r.invocations, r.kills, r.st.Batches, r.st.Checked, r.st.Corrected, r.work.Reads, r.work.Commits, r.work.RowWrites)
		if r.st.Checked != checked || r.st.Corrected != corrected || r.st.Skipped != 0 {
			return fmt.Errorf("%s: checked %d, corrected %d, skipped %d; want %d, %d, 0", r.name, r.st.Checked, r.st.Corrected, r.st.Skipped, checked, corrected)
		}
		return nil
	}
	r, err := runRecon(ctx, cs, o, "hourly", hourly, 0)
	if err := check(r, err, c.moved, movedDrift); err != nil {
		return err
	}
	// A killed invocation is killed before the time the whole run took.
	hourlyKill := min(o.budget, r.took)
	r, err = runRecon(ctx, cs, o, "daily", daily, 0)
	if err := check(r, err, c.counters, len(c.drift)-movedDrift); err != nil {
		return err
	}
	dailyKill := min(o.budget, r.took)
	// The same drift again, and each run killed again and again.
	redrift := func() error {
		_, err := write(spannerdb.Uncounted(ctx), db, len(c.drift), genBatch, func(j int) []*spanner.Mutation {
			return []*spanner.Mutation{spanner.Update("Counters", []string{"CounterKey", "Dislikes"}, []any{c.drift[j], int64(1)})}
		})
		return err
	}
	if err := redrift(); err != nil {
		return err
	}
	r, err = runRecon(ctx, cs, o, "hourly, killed and resumed", hourly, hourlyKill)
	if err := check(r, err, c.moved, movedDrift); err != nil {
		return err
	}
	r, err = runRecon(ctx, cs, o, "daily, killed and resumed", daily, dailyKill)
	if err := check(r, err, c.counters, len(c.drift)-movedDrift); err != nil {
		return err
	}
	var likes, dislikes int64
	err = db.Single().Query(ctx, spanner.Statement{SQL: `SELECT SUM(Likes), SUM(Dislikes) FROM Counters`}).Do(func(r *spanner.Row) error {
		return r.Columns(&likes, &dislikes)
	})
	if err != nil {
		return err
	}
	fmt.Printf("   after the runs: likes %d (the rows: %d), dislikes %d (0)\n\n", likes, c.rows, dislikes)
	if likes != int64(c.rows) || dislikes != 0 {
		return errors.New("reconciliation left counters wrong")
	}
	if o.out == "" {
		return nil
	}
	return stamp.Write(o.out, "Reconciliation, hourly and daily", reconcileReport(o, c, gen, runs))
}

// reconcileReport is the body of docs/benchmarks/reconcile.md.
func reconcileReport(o options, c corpus, gen time.Duration, runs []reconcileRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated in %.0f s (batched mutations, not through the pipeline): %d counters; %d items with reactions, %d reaction rows "+
		"(likes of distinct accounts, each in its item's tally), the hot item %d of them; every %d-th counter's truth moved this hour "+
		"(%d counters, %d of the items' reaction rows); %d counters drifted by one like. "+
		"Each run is worked by invocations of at most %v (4 slices at once), as the per-minute `slices` invocations work it; "+
		"the killed runs have every invocation cancelled at a random moment before the budget or the time the whole run took unkilled, whichever is shorter, and the same drift injected again first; "+
		"a killed invocation's slices wait for their leases (2 minutes) before another invocation resumes them. "+
		"Spanner work is counted on the wire (spannerdb's interceptors): read and query calls, commits, row writes. "+
		"The emulator runs one read-write transaction at a time, so the times are the emulator's pace on this machine, shared with other work (see uptime).\n\n",
		gen.Seconds(), c.counters, c.items, c.rows, c.hotRows, o.recentEvery, c.moved, c.movedRows, len(c.drift), o.budget)
	b.WriteString("| run | time | invocations (killed) | batches | checked | corrected | read calls | commits | row writes |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %.1f s | %d (%d) | %d | %d | %d | %d | %d | %d |\n",
			r.name, r.took.Seconds(), r.invocations, r.kills, r.st.Batches, r.st.Checked, r.st.Corrected, r.work.Reads, r.work.Commits, r.work.RowWrites)
	}
	hourly, daily := runs[0], runs[1]
	perHourly := hourly.took.Seconds() / float64(max(hourly.st.Checked, 1))
	perDaily := daily.took.Seconds() / float64(max(daily.st.Checked, 1))
	const askedCounters, askedRows = 1_000_000, 10_000_000
	fmt.Fprintf(&b, "\nReaction rows the hourly run counts: none; it reads the moved items' tallies (at most 65 rows an item, here 2). "+
		"The hourly pass it replaces counted every reaction row of every moved item, here %d index entries, and every item whose counter folded views.\n\n", c.movedRows)
	fmt.Fprintf(&b, "## At the asked size\n\n"+
		"The target size is %d counters and %d reaction rows; this run has %d and %d (%.1f%% and %.1f%%): the emulator writes the generated rows at a few thousand a second "+
		"one transaction at a time, so the asked corpus takes hours to generate here. Scaled linearly from this run's pace on the emulator (%.2f ms a counter hourly, %.2f ms daily; "+
		"the daily pass's recount reads every reaction row once, so it also scales with the rows):\n\n"+
		"- hourly, with %d counters moved (1 in %d): %.0f s of one worker's emulator time;\n"+
		"- daily over %d counters: %.0f s of one worker's emulator time, cut into %d slices that the per-minute invocations work in parallel.\n\n"+
		"In Spanner the slices' transactions run in parallel (the emulator serialises them), so the wall time divides by the invocations at work; "+
		"capacity.md gives the deployed instances.\n",
		askedCounters, askedRows, c.counters, c.rows, 100*float64(c.counters)/askedCounters, 100*float64(c.rows)/askedRows,
		1000*perHourly, 1000*perDaily,
		askedCounters/o.recentEvery, o.recentEvery, perHourly*float64(askedCounters/o.recentEvery),
		askedCounters, perDaily*askedCounters, o.slices)
	return b.String()
}
