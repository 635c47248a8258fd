package foldstore

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/views"
)

// foldBatch is how many counters one fold transaction folds: few enough that
// the transaction's locks stay short, many enough that a rollup of thousands
// of moved counters is not thousands of commits.
const foldBatch = 32

// maxFoldPerPass bounds one pass of one partition; what is left waits for
// the next tick.
const maxFoldPerPass = 20000

// DefaultWorkers is how many fold transactions one pass runs at once.
const DefaultWorkers = 8

// Pass selects the part of the moved set a pass folds and how.
type Pass struct {
	// Partition of Partitions (default 0 of 1: every counter). Partition i
	// folds the counters whose Part is in counter.PartRange(i, n): the
	// ranges of one n are disjoint, so instances folding different
	// partitions never fold the same counter.
	Partition, Partitions int
	// Workers is how many fold transactions run at once (default
	// DefaultWorkers; against the emulator, which runs one read-write
	// transaction at a time, they queue).
	Workers int
}

// Stats says what one fold pass did.
type Stats struct {
	Counters int // counters visited
	Shards   int // shard rows folded
	Commits  int
	// Resized lists the counters whose shard count changed: key → new count.
	Resized map[string]int
	// Oldest is the commit time of the oldest unfolded delta the pass found
	// (zero when none): the rollup lag is its age.
	Oldest time.Time
	// Listed is when the pass listed the moved set.
	Listed time.Time
}

// Lag is the age, when the pass listed the moved set, of the oldest delta
// not yet folded (0 when there was none).
func (st Stats) Lag() time.Duration {
	if st.Oldest.IsZero() {
		return 0
	}
	return max(st.Listed.Sub(st.Oldest), 0)
}

// Fold folds every moved counter (FoldPart of the whole set).
func (s *Store) Fold(ctx context.Context) (Stats, error) {
	return s.FoldPart(ctx, Pass{})
}

// FoldPart visits the counters of one partition that moved since their last
// fold (and only those, from MovedCounters) and, per batch of counters in one
// read-write transaction, adds their shards to their snapshots and deletes
// them, and sets their shard counts from the write rate the shards measured.
// Batches run on o.Workers workers. Two folds of the same counter at once
// (an operator's run beside a scheduled one) stay exact: each is one
// transaction, and the second finds the shards gone.
func (s *Store) FoldPart(ctx context.Context, o Pass) (Stats, error) {
	st := Stats{Resized: map[string]int{}}
	if o.Partitions == 0 {
		o.Partitions = 1
	}
	lo, hi, err := counter.PartRange(o.Partition, o.Partitions)
	if err != nil {
		return st, fmt.Errorf("foldstore.FoldPart: %w", err)
	}
	workers := o.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	st.Listed = s.now()
	var keys []string
	seen := map[string]bool{}
	// Every marker of the partition is read (not only the first
	// maxFoldPerPass keys) so that the oldest delta is the true oldest. One
	// range of the index by Part, read by key: the emulator would run an
	// SQL query as a scan of the whole table.
	parts := spanner.KeyRange{Start: spanner.Key{int64(lo)}, End: spanner.Key{int64(hi)}, Kind: spanner.ClosedOpen}
	err = s.db.Single().ReadUsingIndex(ctx, counterdb.Moved, counterdb.MovedByPart, parts, []string{"CounterKey", "MovedTime"}).Do(func(r *spanner.Row) error {
		var k string
		var t spanner.NullTime
		if err := counterdb.Columns(r, &k, &t); err != nil {
			return err
		}
		if t.Valid && (st.Oldest.IsZero() || t.Time.Before(st.Oldest)) {
			st.Oldest = t.Time
		}
		if !seen[k] && len(keys) < maxFoldPerPass {
			seen[k] = true
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("foldstore.FoldPart: list moved counters: %w", err)
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, batch := range counterdb.Chunks(keys, foldBatch) {
		g.Go(func() error {
			n, resized, err := s.foldTx(gctx, batch)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			st.Counters += len(batch)
			st.Shards += n
			st.Commits++
			maps.Copy(st.Resized, resized)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return st, fmt.Errorf("foldstore.FoldPart: %w", err)
	}
	return st, nil
}

func (s *Store) foldTx(ctx context.Context, keys []string) (int, map[string]int, error) {
	var folded int
	var resized map[string]int
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		folded, resized = 0, map[string]int{}
		var ks []spanner.Key
		var prefixes []spanner.KeySet
		for _, k := range keys {
			ks = append(ks, spanner.Key{k})
			prefixes = append(prefixes, spanner.Key{k}.AsPrefix())
		}
		type snap struct {
			v        counter.Values
			shards   int64
			foldTime spanner.NullTime
			// truthHour is when a fold last moved a reconciled field.
			truthHour spanner.NullTime
			viewers   []byte
		}
		snaps := map[string]snap{}
		cols := append(append([]string{"CounterKey", "Shards", "FoldTime", "TruthHour"}, counterdb.ValueColumns...), counterdb.Viewers)
		err := tx.Read(ctx, counterdb.Counters, spanner.KeySetFromKeys(ks...), cols).Do(func(r *spanner.Row) error {
			var k string
			var sn snap
			if err := counterdb.Columns(r, &k, &sn.shards, &sn.foldTime, &sn.truthHour); err != nil {
				return err
			}
			v, err := counterdb.ReadValues(r, 4)
			if err != nil {
				return err
			}
			if err := r.Column(4+len(counterdb.ValueColumns), &sn.viewers); err != nil {
				return err
			}
			sn.v = v
			snaps[k] = sn
			return nil
		})
		if err != nil {
			return fmt.Errorf("read snapshots: %w", err)
		}
		sums := map[string]counter.Values{}
		writes := map[string]int64{}
		// The shards' viewers, merged into each snapshot's sketch.
		viewers := map[string]*views.Viewers{}
		var ms []*spanner.Mutation
		cols = append(append([]string{"CounterKey", "Shard", "Writes"}, counterdb.ValueColumns...), counterdb.Viewers)
		err = tx.Read(ctx, counterdb.Shards, spanner.KeySets(prefixes...), cols).Do(func(r *spanner.Row) error {
			var k string
			var shard, w int64
			if err := counterdb.Columns(r, &k, &shard, &w); err != nil {
				return err
			}
			v, err := counterdb.ReadValues(r, 3)
			if err != nil {
				return err
			}
			var vb []byte
			if err := r.Column(3+len(counterdb.ValueColumns), &vb); err != nil {
				return err
			}
			if len(vb) > 0 {
				if viewers[k] == nil {
					viewers[k] = views.NewViewers()
				}
				if err := viewers[k].MergeBytes(vb); err != nil {
					return fmt.Errorf("viewers of %s: %w", k, err)
				}
			}
			sums[k] = sums[k].Plus(v)
			writes[k] += w
			folded++
			ms = append(ms, spanner.Delete(counterdb.Shards, spanner.Key{k, shard}))
			return nil
		})
		if err != nil {
			return fmt.Errorf("read shards: %w", err)
		}
		// The moved markers, shard markers and revisit markers alike, go.
		ms = append(ms, spanner.Delete(counterdb.Moved, spanner.KeySets(prefixes...)))
		now := s.now()
		for _, k := range keys {
			sn, ok := snaps[k]
			if !ok {
				// A marker without a counter (its rows were removed): nothing to fold.
				continue
			}
			elapsed := s.window
			if sn.foldTime.Valid {
				elapsed = min(max(now.Sub(sn.foldTime.Time), 0), 2*s.window)
			}
			next := s.policy.Next(int(sn.shards), writes[k], elapsed)
			if int64(next) != sn.shards {
				resized[k] = next
			}
			c, vals := counterdb.WithValues([]string{"CounterKey", "Shards", "FoldTime"}, []any{k, int64(next), spanner.CommitTimestamp}, sn.v.Plus(sums[k]))
			if h := counterdb.TruthHour(now); movesTruth(sums[k]) && (!sn.truthHour.Valid || !sn.truthHour.Time.Equal(h)) {
				// The hourly reconciliation checks it (reconcilestore).
				c, vals = append(c, "TruthHour"), append(vals, h)
			}
			if vs := viewers[k]; vs != nil {
				if err := vs.MergeBytes(sn.viewers); err != nil {
					return fmt.Errorf("viewers of %s: %w", k, err)
				}
				c, vals = append(c, counterdb.Viewers), append(vals, vs.Bytes())
			}
			ms = append(ms, spanner.Update(counterdb.Counters, c, vals))
			if next > counter.MinShards {
				// Come back next tick, moved or not, to lower the count once
				// the writes stop.
				ms = append(ms, spanner.InsertOrUpdate(counterdb.Moved, []string{"CounterKey", "Shard"}, []any{k, int64(revisitShard)}))
			}
		}
		return tx.BufferWrite(ms)
	})
	return folded, resized, err
}

// ShardCount returns a counter's current shard count (MinShards when it has
// no snapshot yet).
func (s *Store) ShardCount(ctx context.Context, key string) (int, error) {
	row, err := s.db.Single().ReadRow(ctx, counterdb.Counters, spanner.Key{key}, []string{"Shards"})
	if spanner.ErrCode(err) == 5 { // NotFound
		return counter.MinShards, nil
	}
	if err != nil {
		return 0, fmt.Errorf("foldstore.ShardCount: %w", err)
	}
	var n int64
	if err := row.Columns(&n); err != nil {
		return 0, err
	}
	return int(n), nil
}
