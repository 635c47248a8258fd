package commentstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// tableTallies keeps the comments' truth per counter (045_jobs.sql,
// 080_threads.sql).
const tableTallies = "CommentTallies"

// tallyShards is how many rows a counter's tally is spread over: the posts
// of a viral video, group-committed on several instances at once, each write
// one of them.
const tallyShards = 16

// baseShard is the row a counter's tally starts from: the recount of its
// comments and replies when the tally was first written (zero for a counter
// whose comments all came with tallies). Written once and only read after,
// so the writers of the other shards share it without conflict. A counter
// without it has no tally yet (its comments predate the tallies): its truth
// is its recount, and the first write of its tally starts it.
const baseShard = -1

// threadsBaseShard is the row a counter's threads start from, as baseShard
// is for its comments and replies: the recount of its threads when they were
// first tallied. The tallies kept no threads at first, so a tally may have a
// base row and none of these; its threads are then recounted, and its next
// write starts them.
const threadsBaseShard = -2

// tallyColumns are the columns of a tally row.
var tallyColumns = []string{"CounterKey", "Shard", "Comments", "Replies", "Threads"}

// tallied are the fields the tallies keep.
var tallied = []counter.Field{counter.Comments, counter.Replies, counter.Threads}

// readTally reads a row of tallyColumns.
func readTally(r *spanner.Row) (key string, shard int64, v counter.Values, err error) {
	err = r.Columns(&key, &shard, &v.Comments, &v.Replies, &v.Threads)
	return key, shard, v, err
}

// tallyRow writes one row of a tally.
func tallyRow(key string, shard int64, v counter.Values) *spanner.Mutation {
	return spanner.InsertOrUpdate(tableTallies, tallyColumns, []any{key, shard, v.Comments, v.Replies, v.Threads})
}

// unstarted says which base rows of a counter's tally are missing.
type unstarted struct{ base, threads bool }

// tallyMutations adds the comments, replies and threads deltas of evs, the
// changes of the comments' truth that the same transaction records in the
// outbox, to one random shard of each counter's tally: the tally is then the
// truth, exactly, at every timestamp. A counter whose tally lacks a base row
// gets it first (startTallies).
func tallyMutations(ctx context.Context, tx *spanner.ReadWriteTransaction, evs []events.Event) ([]*spanner.Mutation, error) {
	sums := map[string]counter.Values{}
	for _, ev := range evs {
		for _, d := range ev.Deltas {
			if slices.Contains(tallied, d.Field) {
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
		ks = append(ks, spanner.Key{k, pick[k]}, spanner.Key{k, int64(baseShard)}, spanner.Key{k, int64(threadsBaseShard)})
	}
	cur := map[string]counter.Values{}
	start := map[string]unstarted{}
	for _, k := range keys {
		start[k] = unstarted{base: true, threads: true}
	}
	err := tx.Read(ctx, tableTallies, spanner.KeySetFromKeys(ks...), tallyColumns).Do(func(r *spanner.Row) error {
		k, shard, v, err := readTally(r)
		if err != nil {
			return err
		}
		u := start[k]
		switch shard {
		case baseShard:
			u.base = false
		case threadsBaseShard:
			u.threads = false
		default:
			cur[k] = v
		}
		start[k] = u
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tallies: %w", err)
	}
	for k, u := range start {
		if !u.base && !u.threads {
			delete(start, k)
		}
	}
	ms, err := startTallies(ctx, tx, start)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		ms = append(ms, tallyRow(k, pick[k], cur[k].Plus(sums[k])))
	}
	return ms, nil
}

// startTallies writes the missing base rows of the tallies of start's keys:
// the recount of their comments (as of the transaction's reads, so without
// the transaction's own changes) less what their other rows already hold.
// Run once per counter and base row, by its first comment write since the
// tallies (or their threads) exist, or by BackfillTallies; its reads of every
// shard and of the listing make a concurrent writer of the same counter wait
// or retry.
func startTallies(ctx context.Context, tx *spanner.ReadWriteTransaction, start map[string]unstarted) ([]*spanner.Mutation, error) {
	if len(start) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(start))
	for k := range start {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	truth, err := recount(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	prefixes := make([]spanner.KeySet, len(keys))
	for i, k := range keys {
		prefixes[i] = spanner.Key{k}.AsPrefix()
	}
	held := map[string]counter.Values{}
	err = tx.Read(ctx, tableTallies, spanner.KeySets(prefixes...), tallyColumns).Do(func(r *spanner.Row) error {
		k, shard, v, err := readTally(r)
		if err != nil {
			return err
		}
		// A base row being written now holds nothing yet.
		if shard == baseShard && start[k].base || shard == threadsBaseShard && start[k].threads {
			return nil
		}
		held[k] = held[k].Plus(v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tallies: %w", err)
	}
	var ms []*spanner.Mutation
	for _, k := range keys {
		missing := truth[k].Minus(held[k])
		if start[k].base {
			ms = append(ms, tallyRow(k, baseShard, counter.Values{Comments: missing.Comments, Replies: missing.Replies}))
		}
		if start[k].threads {
			ms = append(ms, tallyRow(k, threadsBaseShard, counter.Values{Threads: missing.Threads}))
		}
	}
	return ms, nil
}

// BackfillTallies starts the tallies of keys (videos and comments) that lack
// a base row, each key in its own read-write transaction, so that a comment
// written meanwhile is counted exactly once. Nothing needs it: a counter's
// first comment write starts its tally, and until then reconciliation
// recounts it (Source.Truth); it saves those recounts for counters whose
// comments predate the tallies (or their threads) and that get no new
// comment.
func (s *Store) BackfillTallies(ctx context.Context, keys []string) error {
	for _, k := range keys {
		_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			u := unstarted{base: true, threads: true}
			ks := spanner.KeySetFromKeys(spanner.Key{k, int64(baseShard)}, spanner.Key{k, int64(threadsBaseShard)})
			err := tx.Read(ctx, tableTallies, ks, []string{"Shard"}).Do(func(r *spanner.Row) error {
				var shard int64
				if err := r.Columns(&shard); err != nil {
					return err
				}
				if shard == baseShard {
					u.base = false
				} else {
					u.threads = false
				}
				return nil
			})
			if err != nil || !u.base && !u.threads {
				return err
			}
			ms, err := startTallies(ctx, tx, map[string]unstarted{k: u})
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
