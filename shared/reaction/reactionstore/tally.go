package reactionstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/reaction"
)

// tableTallies keeps the reactions' truth per item (090_reaction_tallies.sql).
const tableTallies = "ReactionTallies"

// tallyShards is how many rows take an item's tally writes: the group
// commits of a hot item on many instances at once each write one of them,
// as the counters' shards spread the consumers'.
const tallyShards = 64

// baseShard is the row that says an item's tally is complete: none of its
// reaction rows predates the tallies (Tallied NULL). It holds the daily
// repairs of the tally. An item without it is recounted from its rows.
const baseShard = -1

var tallyColumns = []string{"ContentId", "Shard", "Likes", "Dislikes"}

// tallyRow writes one row of an item's tally.
func tallyRow(key string, shard int64, v counter.Values) *spanner.Mutation {
	return spanner.InsertOrUpdate(tableTallies, tallyColumns, []any{key, shard, v.Likes, v.Dislikes})
}

// tallyMutations adds sums, the moves of the items' truth recorded by the
// same transaction, to one random shard of each item's tally, so that the
// tally equals the sum of the tallied rows at every timestamp. An item
// without a base row gets one when none of its rows predates the tallies
// (its first reaction since); otherwise the daily reconciliation moves those
// rows in and writes it (BackfillTallies).
func tallyMutations(ctx context.Context, tx *spanner.ReadWriteTransaction, sums map[string]counter.Values) ([]*spanner.Mutation, error) {
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
	err := tx.Read(ctx, tableTallies, spanner.KeySetFromKeys(ks...), tallyColumns).Do(func(r *spanner.Row) error {
		var k string
		var shard int64
		var v counter.Values
		if err := r.Columns(&k, &shard, &v.Likes, &v.Dislikes); err != nil {
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
	var ms []*spanner.Mutation
	for _, k := range keys {
		if !based[k] {
			legacy, err := hasUntallied(ctx, tx, k)
			if err != nil {
				return nil, err
			}
			if !legacy {
				ms = append(ms, spanner.Insert(tableTallies, tallyColumns, []any{k, int64(baseShard), int64(0), int64(0)}))
			}
		}
		ms = append(ms, tallyRow(k, pick[k], cur[k].Plus(sums[k])))
	}
	return ms, nil
}

// indexReader is a transaction of either kind.
type indexReader interface {
	ReadUsingIndex(ctx context.Context, table, index string, keys spanner.KeySet, columns []string) *spanner.RowIterator
}

// hasUntallied says whether an item has a reaction row that predates the
// tallies; it stops at the first one. It reads the item's range of
// ReactionsByContent (which stores Tallied) by key: the writers ask it of an
// item without a base row inside their transaction, and the emulator runs
// every SQL query as a scan of the table.
func hasUntallied(ctx context.Context, tx indexReader, key string) (bool, error) {
	it := tx.ReadUsingIndex(ctx, tableReactions, "ReactionsByContent", spanner.Key{key}.AsPrefix(), []string{"Tallied"})
	defer it.Stop()
	for {
		r, err := it.Next()
		if err == iterator.Done {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("look for untallied reactions of %s: %w", key, err)
		}
		var tallied spanner.NullBool
		if err := r.Columns(&tallied); err != nil {
			return false, fmt.Errorf("look for untallied reactions of %s: %w", key, err)
		}
		if !tallied.Valid {
			return true, nil
		}
	}
}

// flagsWatermark names the JobWatermarks row of ApplyFlags: the
// (UpdateTime, UserId) of the last account whose flag is in the tallies.
const flagsWatermark = "reaction-tally-flags"

// flagBatch bounds the reaction rows one ApplyFlags transaction moves, and
// flagPage the accounts it lists at a time.
const (
	flagBatch = 500
	flagPage  = 1000
)

// FlagReport says what one ApplyFlags did.
type FlagReport struct {
	// Users counts the accounts it finished, Moved the reaction rows it
	// moved in or out of their tallies.
	Users, Moved int
	// Done says every flag change is in the tallies.
	Done bool
}

// drain works each of keys to its end, a batch (one transaction) at a time:
// batch moves up to a batch of the key's rows and says whether they were its
// last. It adds to *batches the batches it ran, to *moved the rows they
// moved and to *finished the keys it ended, and stops (false) before a
// batch once until has passed (zero: never), though never before a run's
// first batch, so every run makes progress.
func drain[K any](keys []K, until time.Time, batches, moved, finished *int, batch func(K) (int, bool, error)) (inTime bool, err error) {
	for _, k := range keys {
		for last := false; !last; {
			if *batches > 0 && !until.IsZero() && !time.Now().Before(until) {
				return false, nil
			}
			*batches++
			n, l, err := batch(k)
			if err != nil {
				return false, err
			}
			*moved += n
			last = l
		}
		*finished++
	}
	return true, nil
}

// flagMark is a position in the accounts' (UpdateTime, UserId) order.
type flagMark struct {
	at   time.Time
	user string
}

func (m flagMark) before(o flagMark) bool {
	return m.at.Before(o.at) || m.at.Equal(o.at) && m.user < o.user
}

// ApplyFlags brings the tallies up to date with the accounts flagged or
// unflagged since its watermark, in the order of their flag rows'
// UpdateTime: each of an account's reaction rows whose Tallied disagrees with
// its flag now is moved out of (or into) its item's tally, in transactions
// of at most flagBatch rows that also mark the items' counters for the
// hourly reconciliation; the last of an account's transactions moves the
// watermark past it. Each row's move reads and writes the row, so a run
// killed anywhere and run again moves nothing twice, and it resumes after
// the last account finished, so it skips none. It stops at until (zero:
// never), leaving the rest to the next run; every run does at least one
// transaction.
func (s *Store) ApplyFlags(ctx context.Context, until time.Time) (FlagReport, error) {
	var rep FlagReport
	batches := 0
	for {
		var from spanner.NullTime
		var cursor spanner.NullString
		var page []flagMark
		err := s.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
			page = nil
			row, err := tx.ReadRow(ctx, tableWatermarks, spanner.Key{flagsWatermark}, []string{"Watermark", "Cursor"})
			switch {
			case spanner.ErrCode(err) == codes.NotFound:
			case err != nil:
				return err
			default:
				if err := row.Columns(&from, &cursor); err != nil {
					return err
				}
			}
			stmt := spanner.Statement{SQL: `SELECT UserId, UpdateTime FROM FlaggedUsers
ORDER BY UpdateTime, UserId LIMIT @limit`, Params: map[string]any{"limit": int64(flagPage)}}
			if from.Valid {
				stmt.SQL = `SELECT UserId, UpdateTime FROM FlaggedUsers
WHERE UpdateTime > @from OR (UpdateTime = @from AND UserId > @cursor)
ORDER BY UpdateTime, UserId LIMIT @limit`
				stmt.Params["from"], stmt.Params["cursor"] = from.Time, cursor.StringVal
			}
			return tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
				var m flagMark
				if err := r.Columns(&m.user, &m.at); err != nil {
					return err
				}
				page = append(page, m)
				return nil
			})
		})
		if err != nil {
			return rep, fmt.Errorf("reactionstore.ApplyFlags: list accounts: %w", err)
		}
		if len(page) == 0 {
			rep.Done = true
			return rep, nil
		}
		inTime, err := drain(page, until, &batches, &rep.Moved, &rep.Users, func(m flagMark) (int, bool, error) {
			n, last, err := s.applyFlag(ctx, m)
			if err != nil {
				return 0, false, fmt.Errorf("reactionstore.ApplyFlags(%s): %w", m.user, err)
			}
			return n, last, nil
		})
		if err != nil || !inTime {
			return rep, err
		}
	}
}

// applyFlag moves up to flagBatch of the account's reaction rows whose
// Tallied disagrees with its flag and returns how many it moved; when they
// were the last (last), the same transaction moves the watermark to m
// unless another run moved it further.
func (s *Store) applyFlag(ctx context.Context, m flagMark) (moved int, last bool, err error) {
	_, err = s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		moved, last = 0, false
		row, err := tx.ReadRow(ctx, tableFlagged, spanner.Key{m.user}, []string{"Flagged"})
		if err != nil {
			return err
		}
		var flagged bool
		if err := row.Columns(&flagged); err != nil {
			return err
		}
		sums := map[string]counter.Values{}
		var ms []*spanner.Mutation
		err = tx.Query(ctx, spanner.Statement{
			SQL: `SELECT ContentId, Reaction FROM Reactions WHERE UserId = @user AND Tallied = @wrong
ORDER BY ContentId LIMIT @limit`,
			Params: map[string]any{"user": m.user, "wrong": flagged, "limit": int64(flagBatch)},
		}).Do(func(r *spanner.Row) error {
			var id, kind string
			if err := r.Columns(&id, &kind); err != nil {
				return err
			}
			v := reaction.Counted(reaction.Kind(kind))
			if flagged {
				v = counter.Values{}.Minus(v)
			}
			sums[id] = sums[id].Plus(v)
			ms = append(ms, spanner.Update(tableReactions, []string{"UserId", "ContentId", "Tallied"}, []any{m.user, id, !flagged}))
			moved++
			return nil
		})
		if err != nil {
			return err
		}
		tms, err := tallyMutations(ctx, tx, sums)
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(sums))
		for k := range sums {
			keys = append(keys, k)
		}
		cms, err := reconcilestore.MarkTruthMoved(ctx, tx, keys, s.now())
		if err != nil {
			return err
		}
		ms = append(append(ms, tms...), cms...)
		if moved < flagBatch {
			last = true
			wm, err := tx.ReadRow(ctx, tableWatermarks, spanner.Key{flagsWatermark}, []string{"Watermark", "Cursor"})
			var cur flagMark
			var c spanner.NullString
			switch {
			case spanner.ErrCode(err) == codes.NotFound:
			case err != nil:
				return err
			default:
				if err := wm.Columns(&cur.at, &c); err != nil {
					return err
				}
				cur.user = c.StringVal
			}
			if spanner.ErrCode(err) == codes.NotFound || cur.before(m) {
				ms = append(ms, spanner.InsertOrUpdate(tableWatermarks, []string{"Name", "Watermark", "Cursor", "UpdateTime"},
					[]any{flagsWatermark, m.at, m.user, spanner.CommitTimestamp}))
			}
		}
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	})
	return moved, last, err
}
