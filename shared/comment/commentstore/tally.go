package commentstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// tableTallies keeps the comments' truth per counter (045_jobs.sql).
const tableTallies = "CommentTallies"

// tallyShards is how many rows a counter's tally is spread over: the posts
// of a viral video, group-committed on several instances at once, each write
// one of them.
const tallyShards = 16

// tallyMutations adds the comments and replies deltas of evs, the changes of
// the comments' truth that the same transaction records in the outbox, to
// one random shard of each counter's tally: the tally is then the truth,
// exactly, at every timestamp.
func tallyMutations(ctx context.Context, tx *spanner.ReadWriteTransaction, evs []events.Event) ([]*spanner.Mutation, error) {
	sums := map[string]counter.Values{}
	for _, ev := range evs {
		for _, d := range ev.Deltas {
			if d.Field == counter.Comments || d.Field == counter.Replies {
				v := sums[d.Key]
				v.Add(d.Field, d.N)
				sums[d.Key] = v
			}
		}
	}
	keys := make([]string, 0, len(sums))
	for k, v := range sums {
		if !v.IsZero() {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	sort.Strings(keys)
	pick := map[string]int64{}
	var ks []spanner.Key
	for _, k := range keys {
		pick[k] = rand.Int64N(tallyShards)
		ks = append(ks, spanner.Key{k, pick[k]})
	}
	cur := map[string]counter.Values{}
	err := tx.Read(ctx, tableTallies, spanner.KeySetFromKeys(ks...), []string{"CounterKey", "Comments", "Replies"}).Do(func(r *spanner.Row) error {
		var k string
		var v counter.Values
		if err := r.Columns(&k, &v.Comments, &v.Replies); err != nil {
			return err
		}
		cur[k] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tallies: %w", err)
	}
	var ms []*spanner.Mutation
	for _, k := range keys {
		v := cur[k].Plus(sums[k])
		ms = append(ms, spanner.InsertOrUpdate(tableTallies, []string{"CounterKey", "Shard", "Comments", "Replies"},
			[]any{k, pick[k], v.Comments, v.Replies}))
	}
	return ms, nil
}

// BackfillTallies sets the tallies of keys (videos and comments) to their
// recount, each key in its own read-write transaction, so that a comment
// written meanwhile is counted exactly once: for a database whose comments
// predate the tallies, before reconciliation reads them.
func (s *Store) BackfillTallies(ctx context.Context, keys []string) error {
	for _, k := range keys {
		_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			truth, err := recount(ctx, tx, []string{k})
			if err != nil {
				return err
			}
			v := truth[k]
			return tx.BufferWrite([]*spanner.Mutation{
				spanner.Delete(tableTallies, spanner.Key{k}.AsPrefix()),
				spanner.Insert(tableTallies, []string{"CounterKey", "Shard", "Comments", "Replies"}, []any{k, int64(0), v.Comments, v.Replies}),
			})
		})
		if err != nil {
			return fmt.Errorf("commentstore.BackfillTallies(%s): %w", k, err)
		}
	}
	return nil
}
