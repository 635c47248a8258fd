package reactionstore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/reaction"
)

// UserReaction is one of a user's stored reactions.
type UserReaction struct {
	ContentID  string
	State      reaction.State
	UpdateTime time.Time
}

// ListByUser returns up to limit of the user's reactions on items after the
// given one, in item order: one range read of the user's key range, so that a
// caller pages through any number of them in bounded memory.
func (s *Store) ListByUser(ctx context.Context, userID, after string, limit int) ([]UserReaction, error) {
	// (userID, after] excluded at the start: the range opens after "after".
	kr := spanner.KeyRange{Start: spanner.Key{userID, after}, End: spanner.Key{userID}, Kind: spanner.OpenClosed}
	var out []UserReaction
	err := s.db.Single().ReadWithOptions(ctx, tableReactions, kr,
		[]string{"ContentId", "Reaction", "Version", "Generation", "UpdateTime"},
		&spanner.ReadOptions{Limit: limit}).Do(func(r *spanner.Row) error {
		var u UserReaction
		var kind string
		if err := r.Columns(&u.ContentID, &kind, &u.State.Version, &u.State.Generation, &u.UpdateTime); err != nil {
			return err
		}
		u.State.Reaction = reaction.Kind(kind)
		out = append(out, u)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reactionstore.ListByUser: %w", err)
	}
	return out, nil
}
