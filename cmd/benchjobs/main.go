// Command benchjobs measures the background jobs on the Spanner emulator:
//
//  1. Rollup: moved counters folded per second with 1 worker, N workers,
//     and P partitions of N workers each (as P instances would), at each
//     size of the moved set;
//  2. Reconciliation over generated counters, reaction rows and their
//     tallies (some counters with a known drift, some whose truth moved this
//     hour): an hourly run and a daily run, in slices worked by invocations
//     bounded in time (time, invocations, batches, Spanner work); then the
//     same drift again and each run with every invocation killed at a random
//     moment and resumed by the next, corrections counted exactly once. The
//     figures go to docs/benchmarks/reconcile.md (-reconcile-out).
//
// The counters are generated with batched mutations (thousands of rows per
// commit), not through the pipeline.
//
// The defaults finish in minutes on the emulator of a loaded 2-core machine
// (its commits, not the jobs, set the pace); -moved
// 10000,100000 and -counters 1000000 -reactions 10000000 are the sizes the
// production arithmetic is about (hours to generate there); -moved 0 skips
// the rollup.
//
// Usage: go run ./cmd/benchjobs [-moved 10000] [-workers 8] [-partitions 4]
// [-counters 5000] [-reactions 50000] [-recent-every 10] [-drift 50]
// [-slices 64] [-budget 10s] [-reconcile-out docs/benchmarks/reconcile.md]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/cmd/internal/benchstack"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/spannerdb"
)

type options struct {
	moved      []int
	workers    int
	partitions int
	counters   int
	drift      int
	slices     int
	budget     time.Duration
	// reactions are the generated reaction rows, recentEvery how many
	// counters there are to one whose truth moved this hour; out is the
	// reconciliation's report file ("": none).
	reactions, recentEvery int
	out                    string
}

func main() { benchstack.Main("benchjobs", realMain) }

func realMain(ctx context.Context) error {
	var o options
	var moved string
	flag.StringVar(&moved, "moved", "10000", "sizes of the moved set folded by the rollup (comma-separated; 0: skip)")
	flag.IntVar(&o.workers, "workers", 8, "fold workers of the parallel rollup")
	flag.IntVar(&o.partitions, "partitions", 4, "rollup partitions folded at once")
	flag.IntVar(&o.counters, "counters", 5000, "counters reconciled (0: skip)")
	flag.IntVar(&o.drift, "drift", 50, "of which drifted, to be corrected")
	flag.IntVar(&o.slices, "slices", reconcilestore.DefaultSlices, "slices of a reconciliation run")
	flag.DurationVar(&o.budget, "budget", 10*time.Second, "time of one reconciliation invocation")
	flag.IntVar(&o.reactions, "reactions", 50000, "reaction rows of the reconciled items")
	flag.IntVar(&o.recentEvery, "recent-every", 10, "one counter in this many moved this hour (the hourly run's)")
	flag.StringVar(&o.out, "reconcile-out", "docs/benchmarks/reconcile.md", `the reconciliation's report ("": none)`)
	flag.Parse()
	for _, f := range strings.Split(moved, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return fmt.Errorf("-moved: %q is not a size", f)
		}
		if n > 0 {
			o.moved = append(o.moved, n)
		}
	}
	if o.workers < 1 || o.partitions < 1 || o.drift < 1 || 2*o.drift > o.counters && o.counters > 0 || o.budget < time.Second ||
		o.reactions < 20 || o.recentEvery < 1 {
		return errors.New("want -workers ≥ 1, -partitions ≥ 1, 1 ≤ -drift ≤ -counters/2, -budget ≥ 1s, -reactions ≥ 20, -recent-every ≥ 1")
	}

	w, err := benchstack.Start(ctx, "benchjobs", fmt.Sprintf("bench-jobs-%d", os.Getpid()), nil)
	if err != nil {
		return err
	}
	defer w.Close()
	db := w.DB
	cs := foldstore.New(db, foldstore.Options{})

	fmt.Printf("\nBackground jobs on the Spanner emulator (one read-write transaction at a time), 2 cores\n\n")
	if err := benchRollup(ctx, db, cs, o); err != nil {
		return err
	}
	if o.counters == 0 {
		return nil
	}
	// Reconciliation in a database of its own: the rollup's folded
	// counters would be counters to check (and drifted: no truth holds
	// their likes).
	rcfg, rteardown, err := benchstack.Provision(ctx, w.Emulators, w.Server, fmt.Sprintf("bench-reconcile-%d", os.Getpid()), nil)
	if err != nil {
		return err
	}
	defer rteardown()
	rdb, err := spannerdb.New(ctx, rcfg)
	if err != nil {
		return err
	}
	defer rdb.Client.Close()
	return benchReconcile(ctx, rdb, reconcilestore.New(rdb, reconcilestore.Options{}), o)
}

// keyOf spreads generated keys over the whole key space, as random ids are.
func keyOf(prefix string, i int) string {
	const alphabet = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
	h := uint64(i) * 0x9E3779B97F4A7C15
	return fmt.Sprintf("%c%c%s%08d", alphabet[h>>58], alphabet[(h>>52)&63], prefix, i)
}

// genBatch is how many rows one generating commit writes: the emulator's
// commit time grows faster than linearly with its mutations (measured here:
// 4,200 rows/s in commits of 25 rows, 1,960 of 100, 390 of 600, 96 of
// 1,500), and hardly with the table's size. Commits one after another: the
// emulator runs one read-write transaction at a time and fails concurrent
// ones ("Invalid transaction ID", "Transaction not found"); concurrent
// blind writes (Apply) made 2,800 rows/s, batched DML (INSERT of 500 rows
// a statement) 400–730.
const genBatch = 25

// write commits rows(i) for i in [0, n) in batches of batch counters, and
// returns the commits.
func write(ctx context.Context, db *spannerdb.DB, n, batch int, rows func(i int) []*spanner.Mutation) (int, error) {
	commits := 0
	for lo := 0; lo < n; lo += batch {
		var ms []*spanner.Mutation
		for i := lo; i < min(lo+batch, n); i++ {
			ms = append(ms, rows(i)...)
		}
		if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return tx.BufferWrite(ms)
		}); err != nil {
			return commits, fmt.Errorf("generate: %w", err)
		}
		commits++
	}
	return commits, nil
}

// moveCounters writes n counters with one unfolded shard each (one like),
// marked moved: what n counters written since the last fold leave.
func moveCounters(ctx context.Context, db *spannerdb.DB, prefix string, n int) error {
	_, err := write(ctx, db, n, genBatch/3, func(i int) []*spanner.Mutation {
		k := keyOf(prefix, i)
		return []*spanner.Mutation{
			spanner.InsertOrUpdate("Counters", []string{"CounterKey", "Shards"}, []any{k, int64(counter.MinShards)}),
			spanner.InsertOrUpdate("CounterShards", []string{"CounterKey", "Shard", "Likes", "Writes"}, []any{k, int64(0), int64(1), int64(1)}),
			spanner.InsertOrUpdate("MovedCounters", []string{"CounterKey", "Shard", "MovedTime"}, []any{k, int64(0), spanner.CommitTimestamp}),
		}
	})
	return err
}

type foldRun struct {
	counters, commits int
	took              time.Duration
	maxLag            time.Duration
}

// foldAll folds until the moved set is empty: parts partitions at once,
// each with workers workers, each pass at most maxFoldPerPass counters.
func foldAll(ctx context.Context, cs *foldstore.Store, parts, workers int) (foldRun, error) {
	var r foldRun
	start := time.Now()
	for {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []error
		passCounters := 0
		for p := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := cs.FoldPart(ctx, foldstore.Pass{Partition: p, Partitions: parts, Workers: workers})
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, err)
				passCounters += st.Counters
				r.commits += st.Commits
				r.maxLag = max(r.maxLag, st.Lag())
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return r, err
		}
		r.counters += passCounters
		if passCounters == 0 {
			r.took = time.Since(start)
			return r, nil
		}
	}
}

func benchRollup(ctx context.Context, db *spannerdb.DB, cs *foldstore.Store, o options) error {
	if len(o.moved) == 0 {
		return nil
	}
	type config struct {
		name           string
		parts, workers int
	}
	configs := []config{
		{"1 worker", 1, 1},
		{fmt.Sprintf("%d workers", o.workers), 1, o.workers},
		{fmt.Sprintf("%d partitions × %d workers", o.partitions, o.workers), o.partitions, o.workers},
	}
	fmt.Printf("1. Rollup: moved counters folded per second (each counter one unfolded shard; batches of 32 counters per transaction)\n\n")
	fmt.Printf("   %-9s", "moved")
	for _, c := range configs {
		fmt.Printf("  %-34s", c.name)
	}
	fmt.Println()
	for _, n := range o.moved {
		fmt.Printf("   %-9d", n)
		for ci, c := range configs {
			if err := moveCounters(ctx, db, fmt.Sprintf("r%d-%d-", n, ci), n); err != nil {
				return err
			}
			r, err := foldAll(ctx, cs, c.parts, c.workers)
			if err != nil {
				return err
			}
			if r.counters != n {
				return fmt.Errorf("rollup %s: folded %d counters, %d moved", c.name, r.counters, n)
			}
			fmt.Printf("  %-34s", fmt.Sprintf("%7.0f/s (%5.1f s, %d commits)", float64(n)/r.took.Seconds(), r.took.Seconds(), r.commits))
		}
		fmt.Println()
	}
	fmt.Println()
	return nil
}
