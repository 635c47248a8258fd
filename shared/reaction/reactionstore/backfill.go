package reactionstore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/reaction"
)

// backfillWatermark names the JobWatermarks row of BackfillTallies: Cursor
// is the last item whose tally it completed, backfillDone once every item's
// is.
const backfillWatermark = "reaction-tally-backfill"

// backfillDone is the cursor of a finished backfill: "~" sorts after every
// content id (^[A-Za-z0-9_-]{1,64}$).
const backfillDone = "~"

// backfillPage bounds the items listed at a time.
const backfillPage = 100

// backfillBatch bounds the reaction rows one backfill transaction moves.
var backfillBatch = flagBatch

// BackfillReport says what one BackfillTallies did.
type BackfillReport struct {
	// Items counts the items whose tally it completed, Moved the reaction
	// rows it moved into (or, for flagged accounts, beside) their tallies.
	Items, Moved int
	// Done says no item has a row older than the tallies any longer.
	Done bool
}

// BackfillTallies completes the tallies of the items whose reaction rows
// predate the tallies (Tallied NULL), in item order from where the last
// call stopped: each transaction moves up to backfillBatch of an item's
// rows, setting Tallied from the account's flag now and adding the rows of
// accounts not flagged to one shard of the item's tally, so the tally is
// the sum of its tallied rows at every timestamp; the transaction that
// finds no such row left writes the item's base row (its tally is
// complete: reconciliation reads it instead of counting the rows), marks
// its counter for the hourly pass and moves the cursor past it. A row is
// moved by the transaction that reads it NULL, so a call killed anywhere
// and called again moves nothing twice; a flag change after a row's move
// is ApplyFlags' to apply, as for any row. Rows written since the tallies
// are never NULL, so once the walk reaches the last item it is done for
// good (Done, and later calls cost one row read). It stops at until
// (zero: never); every call does at least one transaction.
func (s *Store) BackfillTallies(ctx context.Context, until time.Time) (BackfillReport, error) {
	var rep BackfillReport
	txs := 0
	for {
		var after string
		var items []string
		err := s.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
			items = nil
			row, err := tx.ReadRow(ctx, tableWatermarks, spanner.Key{backfillWatermark}, []string{"Cursor"})
			switch {
			case spanner.ErrCode(err) == codes.NotFound:
			case err != nil:
				return err
			default:
				var c spanner.NullString
				if err := row.Columns(&c); err != nil {
					return err
				}
				after = c.StringVal
			}
			if after == backfillDone {
				return nil
			}
			return tx.Query(ctx, spanner.Statement{
				SQL: `SELECT DISTINCT ContentId FROM Reactions@{FORCE_INDEX=ReactionsByContent}
WHERE ContentId > @after AND Tallied IS NULL ORDER BY ContentId LIMIT @limit`,
				Params: map[string]any{"after": after, "limit": int64(backfillPage)},
			}).Do(func(r *spanner.Row) error {
				var id string
				if err := r.Columns(&id); err != nil {
					return err
				}
				items = append(items, id)
				return nil
			})
		})
		if err != nil {
			return rep, fmt.Errorf("reactionstore.BackfillTallies: list items: %w", err)
		}
		if after == backfillDone {
			rep.Done = true
			return rep, nil
		}
		if len(items) == 0 {
			if _, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				return tx.BufferWrite([]*spanner.Mutation{s.backfillCursor(backfillDone)})
			}); err != nil {
				return rep, fmt.Errorf("reactionstore.BackfillTallies: finish: %w", err)
			}
			rep.Done = true
			return rep, nil
		}
		inTime, err := drain(items, until, &txs, &rep.Moved, &rep.Items, func(item string) (int, bool, error) {
			n, complete, err := s.backfillItem(ctx, item)
			if err != nil {
				return 0, false, fmt.Errorf("reactionstore.BackfillTallies(%s): %w", item, err)
			}
			return n, complete, nil
		})
		if err != nil || !inTime {
			return rep, err
		}
	}
}

// backfillCursor writes the backfill's cursor.
func (s *Store) backfillCursor(cursor string) *spanner.Mutation {
	return spanner.InsertOrUpdate(tableWatermarks, []string{"Name", "Watermark", "Cursor", "UpdateTime"},
		[]any{backfillWatermark, s.now(), cursor, spanner.CommitTimestamp})
}

// backfillItem moves up to backfillBatch of the item's rows that predate
// the tallies into its tally and returns how many it moved; when none is
// left past them (complete) the same transaction writes the item's base row, marks
// its counter and moves the cursor to it, unless another call moved it
// further.
func (s *Store) backfillItem(ctx context.Context, item string) (moved int, complete bool, err error) {
	_, err = s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		moved, complete = 0, false
		more := false
		var sum counter.Values
		var ms []*spanner.Mutation
		err := tx.Query(ctx, spanner.Statement{
			SQL: `SELECT r.UserId, r.Reaction, f.Flagged
FROM Reactions@{FORCE_INDEX=ReactionsByContent} r
LEFT JOIN FlaggedUsers f ON f.UserId = r.UserId
WHERE r.ContentId = @id AND r.Tallied IS NULL
ORDER BY r.UserId LIMIT @limit`,
			// One row more than it moves: none left past the batch
			// means this transaction completes the tally.
			Params: map[string]any{"id": item, "limit": int64(backfillBatch + 1)},
		}).Do(func(r *spanner.Row) error {
			if moved == backfillBatch {
				more = true
				return nil
			}
			var user, kind string
			var flagged spanner.NullBool
			if err := r.Columns(&user, &kind, &flagged); err != nil {
				return err
			}
			tallied := !flagged.Valid || !flagged.Bool
			if tallied {
				sum = sum.Plus(reaction.Counted(reaction.Kind(kind)))
			}
			ms = append(ms, spanner.Update(tableReactions, []string{"UserId", "ContentId", "Tallied"}, []any{user, item, tallied}))
			moved++
			return nil
		})
		if err != nil {
			return err
		}
		// The tally's shard; the base row is never written here while a
		// row is NULL at the transaction's start (as now).
		tms, err := tallyMutations(ctx, tx, map[string]counter.Values{item: sum})
		if err != nil {
			return err
		}
		ms = append(ms, tms...)
		if !more {
			complete = true
			if _, err := tx.ReadRow(ctx, tableTallies, spanner.Key{item, int64(baseShard)}, []string{"Shard"}); spanner.ErrCode(err) == codes.NotFound {
				ms = append(ms, spanner.Insert(tableTallies, tallyColumns, []any{item, int64(baseShard), int64(0), int64(0)}))
			} else if err != nil {
				return err
			}
			cms, err := reconcilestore.MarkTruthMoved(ctx, tx, []string{item}, s.now())
			if err != nil {
				return err
			}
			ms = append(ms, cms...)
			row, err := tx.ReadRow(ctx, tableWatermarks, spanner.Key{backfillWatermark}, []string{"Cursor"})
			var c spanner.NullString
			switch {
			case spanner.ErrCode(err) == codes.NotFound:
			case err != nil:
				return err
			default:
				if err := row.Columns(&c); err != nil {
					return err
				}
			}
			if c.StringVal < item {
				ms = append(ms, s.backfillCursor(item))
			}
		}
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	})
	return moved, complete, err
}
