package commentstore

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/spannerdb"
)

// fromCommentsByAuthor reads a user's comments by the CommentsByAuthor index
// (050_account_export.sql), in comment id order.
const fromCommentsByAuthor = "Comments@{FORCE_INDEX=CommentsByAuthor}"

// ListByAuthor returns up to limit of the user's comments, whatever their
// status, with ids after the given one, in id order: one bounded range of the
// author index per page, so that a caller pages through thousands in bounded
// memory.
func (s *Store) ListByAuthor(ctx context.Context, userID, after string, limit int) ([]comment.Comment, error) {
	stmt := spanner.Statement{
		SQL: `SELECT ` + commentSelect + ` FROM ` + fromCommentsByAuthor + `
WHERE AuthorId = @author AND CommentId > @after ORDER BY CommentId LIMIT @limit`,
		Params: map[string]any{"author": userID, "after": after, "limit": int64(limit)},
	}
	var out []comment.Comment
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		c, err := scanComment(r)
		if err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commentstore.ListByAuthor: %w", spannerdb.Map(err))
	}
	return out, nil
}

// EraseSome removes up to limit of the user's comments for the account
// erasure: one removal transaction, as a delete by their author (a visible
// comment leaves the counts exactly once, a top-level one with its visible
// replies), that also deletes the rows. Replies by others stay, no longer
// counted or listed, as under a deleted comment. It returns how many it
// removed and the events to publish; none removed means none are left.
func (s *Store) EraseSome(ctx context.Context, userID string, limit int) (int, []events.Event, error) {
	cs, err := s.ListByAuthor(ctx, userID, "", limit)
	if err != nil || len(cs) == 0 {
		return 0, nil, err
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	res, err := s.remove(ctx, Actor{UserID: userID}, ids, comment.Deleted, true, nil, func(found map[string]comment.Comment) error {
		for _, c := range found {
			if c.AuthorID != userID {
				return fmt.Errorf("comment %s is not by the user", c.ID)
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("commentstore.EraseSome: %w", err)
	}
	return len(cs), res.Events, nil
}

// EraseUserRows deletes the user's other rows of the comments' tables: the
// rate-limit row and the Idempotency-Keys.
func (s *Store) EraseUserRows(ctx context.Context, userID string) error {
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.Delete(tableLimits, spanner.Key{userID}),
			spanner.Delete(tableRequests, spanner.Key{userID}.AsPrefix()),
		})
	})
	if err != nil {
		return fmt.Errorf("commentstore.EraseUserRows: %w", err)
	}
	return nil
}
