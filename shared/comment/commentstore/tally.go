package commentstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// tableTallies keeps the comments' truth per counter (045_jobs.sql).
const tableTallies = "CommentTallies"

// tallyShards is how many rows a counter's tally is spread over: the posts
// of a viral video, group-committed on several instances at once, each write
// one of them.
const tallyShards = 16

// baseShard is the row a counter's tally starts from: the recount of its
// comments when the tally was first written (zero for a counter whose
// comments all came with tallies). Written once and only read after, so the
// writers of the other shards share it without conflict. A counter without
// it has no tally yet (its comments predate the tallies): its truth is its
// recount, and the first write of its tally starts it.
const baseShard = -1

// tallyMutations adds the comments and replies deltas of evs, the changes of
// the comments' truth that the same transaction records in the outbox, to
// one random shard of each counter's tally: the tally is then the truth,
// exactly, at every timestamp. A counter whose tally has no base row yet
// gets one first (startTallies).
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
		ks = append(ks, spanner.Key{k, pick[k]}, spanner.Key{k, int64(baseShard)})
	}
	cur := map[string]counter.Values{}
	based := map[string]bool{}
	err := tx.Read(ctx, tableTallies, spanner.KeySetFromKeys(ks...), []string{"CounterKey", "Shard", "Comments", "Replies"}).Do(func(r *spanner.Row) error {
		var k string
		var shard int64
		var v counter.Values
		if err := r.Columns(&k, &shard, &v.Comments, &v.Replies); err != nil {
			return err
		}
		if shard == baseShard {
			based[k] = true
		} else {
			cur[k] = v
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tallies: %w", err)
	}
	var unbased []string
	for _, k := range keys {
		if !based[k] {
			unbased = append(unbased, k)
		}
	}
	ms, err := startTallies(ctx, tx, unbased)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		v := cur[k].Plus(sums[k])
		ms = append(ms, spanner.InsertOrUpdate(tableTallies, []string{"CounterKey", "Shard", "Comments", "Replies"},
			[]any{k, pick[k], v.Comments, v.Replies}))
	}
	return ms, nil
}

// startTallies writes the base rows of keys whose tallies have none: the
// recount of their comments (as of the transaction's reads, so without the
// transaction's own changes) less what their other shards already hold.
// Run once per counter, by its first comment write since the tallies
// exist, or by BackfillTallies; its reads of every shard and of the listing
// make a concurrent writer of the same counter wait or retry.
func startTallies(ctx context.Context, tx *spanner.ReadWriteTransaction, keys []string) ([]*spanner.Mutation, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	truth, err := recount(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	prefixes := make([]spanner.KeySet, len(keys))
	for i, k := range keys {
		prefixes[i] = spanner.Key{k}.AsPrefix()
	}
	held := map[string]counter.Values{}
	err = tx.Read(ctx, tableTallies, spanner.KeySets(prefixes...), []string{"CounterKey", "Shard", "Comments", "Replies"}).Do(func(r *spanner.Row) error {
		var k string
		var shard int64
		var v counter.Values
		if err := r.Columns(&k, &shard, &v.Comments, &v.Replies); err != nil {
			return err
		}
		if shard != baseShard {
			held[k] = held[k].Plus(v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tallies: %w", err)
	}
	var ms []*spanner.Mutation
	for _, k := range keys {
		base := truth[k].Minus(held[k])
		ms = append(ms, spanner.InsertOrUpdate(tableTallies, []string{"CounterKey", "Shard", "Comments", "Replies"},
			[]any{k, int64(baseShard), base.Comments, base.Replies}))
	}
	return ms, nil
}

// BackfillTallies starts the tallies of keys (videos and comments) that have
// none, each key in its own read-write transaction, so that a comment
// written meanwhile is counted exactly once. Nothing needs it: a counter's
// first comment write starts its tally, and until then reconciliation
// recounts it (Source.Truth); it saves those recounts for counters whose
// comments predate the tallies and that get no new comment.
func (s *Store) BackfillTallies(ctx context.Context, keys []string) error {
	for _, k := range keys {
		_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.ReadRow(ctx, tableTallies, spanner.Key{k, int64(baseShard)}, []string{"CounterKey"})
			if err == nil {
				return nil // started already
			}
			if spanner.ErrCode(err) != codes.NotFound {
				return err
			}
			ms, err := startTallies(ctx, tx, []string{k})
			if err != nil {
				return err
			}
			return tx.BufferWrite(ms)
		})
		if err != nil {
			return fmt.Errorf("commentstore.BackfillTallies(%s): %w", k, err)
		}
	}
	return nil
}
