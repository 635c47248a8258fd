package counterstore

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
)

// foldBatch is how many counters one fold transaction folds: few enough that
// the transaction's locks stay short, many enough that a rollup of thousands
// of moved counters is not thousands of commits.
const foldBatch = 32

// maxFoldPerPass bounds one pass; what is left waits for the next tick.
const maxFoldPerPass = 20000

// FoldStats says what one fold pass did.
type FoldStats struct {
	Counters int // counters visited
	Shards   int // shard rows folded
	Commits  int
	// Resized lists the counters whose shard count changed: key → new count.
	Resized map[string]int
}

// Fold visits the counters that moved since their last fold (and only those,
// from MovedCounters) and, per counter in one read-write transaction, adds
// its shards to its snapshot and deletes them, and sets its shard count from
// the write rate the shards measured.
func (s *Store) Fold(ctx context.Context) (FoldStats, error) {
	st := FoldStats{Resized: map[string]int{}}
	if s.mode == Naive {
		return st, nil
	}
	var keys []string
	last := ""
	stmt := spanner.Statement{SQL: fmt.Sprintf(`SELECT DISTINCT CounterKey FROM %s LIMIT %d`, tableMoved, maxFoldPerPass)}
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var k string
		if err := columns(r, &k); err != nil {
			return err
		}
		if k != last {
			keys = append(keys, k)
			last = k
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("counterstore.Fold: list moved counters: %w", err)
	}
	for _, batch := range chunks(keys, foldBatch) {
		n, resized, err := s.foldTx(ctx, batch)
		if err != nil {
			return st, fmt.Errorf("counterstore.Fold: %w", err)
		}
		st.Counters += len(batch)
		st.Shards += n
		st.Commits++
		for k, v := range resized {
			st.Resized[k] = v
		}
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
			viewers  []byte
		}
		snaps := map[string]snap{}
		cols := append(append([]string{"CounterKey", "Shards", "FoldTime"}, valueColumns...), colViewers)
		err := tx.Read(ctx, tableCounters, spanner.KeySetFromKeys(ks...), cols).Do(func(r *spanner.Row) error {
			var k string
			var sn snap
			if err := columns(r, &k, &sn.shards, &sn.foldTime); err != nil {
				return err
			}
			v, err := readValues(r, 3)
			if err != nil {
				return err
			}
			if err := r.Column(3+len(valueColumns), &sn.viewers); err != nil {
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
		viewers := map[string]*counter.Viewers{}
		var ms []*spanner.Mutation
		cols = append(append([]string{"CounterKey", "Shard", "Writes"}, valueColumns...), colViewers)
		err = tx.Read(ctx, tableShards, spanner.KeySets(prefixes...), cols).Do(func(r *spanner.Row) error {
			var k string
			var shard, w int64
			if err := columns(r, &k, &shard, &w); err != nil {
				return err
			}
			v, err := readValues(r, 3)
			if err != nil {
				return err
			}
			var vb []byte
			if err := r.Column(3+len(valueColumns), &vb); err != nil {
				return err
			}
			if len(vb) > 0 {
				if viewers[k] == nil {
					viewers[k] = counter.NewViewers()
				}
				if err := viewers[k].MergeBytes(vb); err != nil {
					return fmt.Errorf("viewers of %s: %w", k, err)
				}
			}
			sums[k] = sums[k].Plus(v)
			writes[k] += w
			folded++
			ms = append(ms, spanner.Delete(tableShards, spanner.Key{k, shard}))
			return nil
		})
		if err != nil {
			return fmt.Errorf("read shards: %w", err)
		}
		// The moved markers, shard markers and revisit markers alike, go.
		ms = append(ms, spanner.Delete(tableMoved, spanner.KeySets(prefixes...)))
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
			c, vals := withValues([]string{"CounterKey", "Shards", "FoldTime"}, []any{k, int64(next), spanner.CommitTimestamp}, sn.v.Plus(sums[k]))
			if vs := viewers[k]; vs != nil {
				if err := vs.MergeBytes(sn.viewers); err != nil {
					return fmt.Errorf("viewers of %s: %w", k, err)
				}
				c, vals = append(c, colViewers), append(vals, vs.Bytes())
			}
			ms = append(ms, spanner.Update(tableCounters, c, vals))
			if next > counter.MinShards {
				// Come back next tick, moved or not, to lower the count once
				// the writes stop.
				ms = append(ms, spanner.InsertOrUpdate(tableMoved, []string{"CounterKey", "Shard"}, []any{k, int64(revisitShard)}))
			}
		}
		return tx.BufferWrite(ms)
	})
	return folded, resized, err
}

// ShardCount returns a counter's current shard count (MinShards when it has
// no snapshot yet).
func (s *Store) ShardCount(ctx context.Context, key string) (int, error) {
	row, err := s.db.Single().ReadRow(ctx, tableCounters, spanner.Key{key}, []string{"Shards"})
	if spanner.ErrCode(err) == 5 { // NotFound
		return counter.MinShards, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counterstore.ShardCount: %w", err)
	}
	var n int64
	if err := row.Columns(&n); err != nil {
		return 0, err
	}
	return int(n), nil
}
