package outboxstore

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/views"
)

// Apply counts events idempotently. An outbox event counts iff its
// PendingDeltas rows still exist, and counting deletes them (a whole outbox
// batch in one range delete, see takeOutbox); any other event
// counts iff its id is not in AppliedEvents, and counting records it there.
// Either way the check and the count commit in one transaction, so a duplicate
// delivery, a crash between commit and acknowledgement, or a replay changes
// nothing.
//
// The whole batch is counted in one transaction: the deltas are summed per
// counter and each counter gets one write, on one random shard.
func (s *Store) Apply(ctx context.Context, evs []events.Event) (counter.ApplyStats, error) {
	st, err := s.applyTx(ctx, uniqueEvents(evs))
	if err == nil {
		st.Commits = 1
	}
	return st, err
}

func uniqueEvents(evs []events.Event) []events.Event {
	seen := make(map[string]bool, len(evs))
	out := evs[:0:0]
	for _, e := range evs {
		if !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e)
		}
	}
	return out
}

func (s *Store) applyTx(ctx context.Context, evs []events.Event) (counter.ApplyStats, error) {
	var st counter.ApplyStats
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		st = counter.ApplyStats{}
		var ms []*spanner.Mutation
		sums := map[string]counter.Values{}
		viewers := map[string][]uint64{}

		var outbox []events.Event
		var plainKeys []spanner.Key
		plain := map[string]events.Event{}
		for _, e := range evs {
			if e.Outbox {
				outbox = append(outbox, e)
			} else {
				plainKeys = append(plainKeys, spanner.Key{e.ID})
				plain[e.ID] = e
			}
		}
		if len(outbox) > 0 {
			oms, applied, dups, err := takeOutbox(ctx, tx, outbox, sums)
			if err != nil {
				return err
			}
			ms = append(ms, oms...)
			st.Applied += applied
			st.Duplicates += dups
		}
		if len(plainKeys) > 0 {
			done := map[string]bool{}
			err := tx.Read(ctx, counterdb.Applied, spanner.KeySetFromKeys(plainKeys...), []string{"EventId"}).Do(func(r *spanner.Row) error {
				var id string
				if err := counterdb.Columns(r, &id); err != nil {
					return err
				}
				done[id] = true
				return nil
			})
			if err != nil {
				return fmt.Errorf("read applied events: %w", err)
			}
			for id, e := range plain {
				if done[id] {
					st.Duplicates++
					continue
				}
				st.Applied++
				for _, d := range e.Deltas {
					v := sums[d.Key]
					v.Add(d.Field, d.N)
					sums[d.Key] = v
				}
				for k, hs := range e.Viewers {
					viewers[k] = append(viewers[k], hs...)
				}
				ms = append(ms, spanner.Insert(counterdb.Applied, []string{"EventId", "AppliedAt"}, []any{id, spanner.CommitTimestamp}))
			}
		}
		for k, v := range sums {
			if v.IsZero() && len(viewers[k]) == 0 {
				delete(sums, k)
			}
		}
		for _, v := range sums {
			st.Counted = st.Counted.Plus(v)
		}
		for k := range viewers {
			if _, ok := sums[k]; !ok {
				sums[k] = counter.Values{}
			}
		}
		if len(sums) > 0 {
			cms, err := s.addToShards(ctx, tx, sums, viewers)
			if err != nil {
				return err
			}
			ms = append(ms, cms...)
			st.Counters = len(sums)
		}
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return counter.ApplyStats{}, fmt.Errorf("outboxstore.Apply: %w", err)
	}
	return st, nil
}

// addToShards adds each counter's sum to one random shard of its current
// shard count, and its viewers to that shard's sketch. The snapshot row is
// read (a shared lock, which concurrent consumers do not contend on) for the
// shard count, and created when absent because shard rows are interleaved
// under it.
func (s *Store) addToShards(ctx context.Context, tx *spanner.ReadWriteTransaction, sums map[string]counter.Values, viewers map[string][]uint64) ([]*spanner.Mutation, error) {
	keys := counterdb.SortedKeys(sums)
	shards := map[string]int64{}
	var ms []*spanner.Mutation
	var ks []spanner.Key
	for _, k := range keys {
		ks = append(ks, spanner.Key{k})
	}
	err := tx.Read(ctx, counterdb.Counters, spanner.KeySetFromKeys(ks...), []string{"CounterKey", "Shards"}).Do(func(r *spanner.Row) error {
		var k string
		var n int64
		if err := counterdb.Columns(r, &k, &n); err != nil {
			return err
		}
		shards[k] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read snapshots: %w", err)
	}
	pick := map[string]int64{}
	var shardKeys []spanner.Key
	for _, k := range keys {
		n, ok := shards[k]
		if !ok {
			n = counter.MinShards
			cols, vals := counterdb.WithValues([]string{"CounterKey", "Shards"}, []any{k, n}, counter.Values{})
			ms = append(ms, spanner.Insert(counterdb.Counters, cols, vals))
		}
		pick[k] = int64(counter.PickShard(int(n)))
		shardKeys = append(shardKeys, spanner.Key{k, pick[k]})
	}
	type shardRow struct {
		v       counter.Values
		writes  int64
		viewers []byte
	}
	cur := map[string]shardRow{}
	cols := append(append([]string{"CounterKey", "Writes"}, counterdb.ValueColumns...), counterdb.Viewers)
	err = tx.Read(ctx, counterdb.Shards, spanner.KeySetFromKeys(shardKeys...), cols).Do(func(r *spanner.Row) error {
		var k string
		var w int64
		if err := counterdb.Columns(r, &k, &w); err != nil {
			return err
		}
		v, err := counterdb.ReadValues(r, 2)
		if err != nil {
			return err
		}
		var vb []byte
		if err := r.Column(2+len(counterdb.ValueColumns), &vb); err != nil {
			return err
		}
		cur[k] = shardRow{v, w, vb}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read shards: %w", err)
	}
	for _, k := range keys {
		c, existed := cur[k]
		cols, vals := counterdb.WithValues([]string{"CounterKey", "Shard", "Writes"}, []any{k, pick[k], c.writes + 1}, c.v.Plus(sums[k]))
		if hs := viewers[k]; len(hs) > 0 {
			b, err := addViewers(c.viewers, hs)
			if err != nil {
				return nil, fmt.Errorf("viewers of %s: %w", k, err)
			}
			cols, vals = append(cols, counterdb.Viewers), append(vals, b)
		}
		ms = append(ms, spanner.InsertOrUpdate(counterdb.Shards, cols, vals))
		if !existed {
			// The shard's first delta since its last fold marks it moved,
			// at this commit's time (the rollup lag is the oldest marker's
			// age). A shard row and its marker are written and folded
			// together, so a shard that exists is already marked.
			ms = append(ms, spanner.InsertOrUpdate(counterdb.Moved, []string{"CounterKey", "Shard", "MovedTime"}, []any{k, pick[k], spanner.CommitTimestamp}))
		}
	}
	return ms, nil
}

// addViewers returns the stored sketch with the viewer hashes added.
func addViewers(stored []byte, hashes []uint64) ([]byte, error) {
	v, err := views.ParseViewers(stored)
	if err != nil {
		return nil, err
	}
	v.Add(hashes...)
	return v.Bytes(), nil
}
