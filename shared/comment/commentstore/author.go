package commentstore

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/comment"
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
