package reactionstore

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/reaction"
)

// ListByUser returns up to limit of the user's reactions on items after the
// given one, in item order: one range read of the user's key range, so that a
// caller pages through any number of them in bounded memory.
func (s *Store) ListByUser(ctx context.Context, userID, after string, limit int) ([]reaction.UserReaction, error) {
	// (userID, after] excluded at the start: the range opens after "after".
	kr := spanner.KeyRange{Start: spanner.Key{userID, after}, End: spanner.Key{userID}, Kind: spanner.OpenClosed}
	var out []reaction.UserReaction
	err := s.db.Single().ReadWithOptions(ctx, tableReactions, kr,
		[]string{"ContentId", "Reaction", "Version", "Generation", "UpdateTime", "CreateTime"},
		&spanner.ReadOptions{Limit: limit}).Do(func(r *spanner.Row) error {
		var u reaction.UserReaction
		var kind string
		var createTime spanner.NullTime
		if err := r.Columns(&u.ContentID, &kind, &u.State.Version, &u.State.Generation, &u.UpdateTime, &createTime); err != nil {
			return err
		}
		u.State.Reaction, u.State.Created = reaction.Kind(kind), createTime.Time
		out = append(out, u)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reactionstore.ListByUser: %w", err)
	}
	return out, nil
}

// EraseSome removes up to limit of the user's reactions for the account
// erasure: each is set to none through SetMany, in one transaction, so its
// like or dislike leaves the totals exactly once (the outbox rows commit
// with the rows' deletion; a reaction already gone changes nothing). It
// returns how many it removed and the events to publish; none removed means
// none are left.
func (s *Store) EraseSome(ctx context.Context, userID string, limit int) (int, []events.Event, error) {
	rs, err := s.ListByUser(ctx, userID, "", limit)
	if err != nil || len(rs) == 0 {
		return 0, nil, err
	}
	reqs := make([]SetRequest, len(rs))
	for i, r := range rs {
		reqs[i] = SetRequest{UserID: userID, ContentID: r.ContentID, To: reaction.None, erase: true}
	}
	res, err := s.SetMany(ctx, reqs)
	if err != nil {
		return 0, nil, fmt.Errorf("reactionstore.EraseSome: %w", err)
	}
	for _, r := range res {
		if r.Err != nil {
			return 0, nil, fmt.Errorf("reactionstore.EraseSome: %w", r.Err)
		}
	}
	return len(rs), Events(res), nil
}

// EraseUserRows deletes the user's other rows of the reactions' tables:
// the rate-limit row and the moderation flag (no count depends on it once
// the user's reactions are gone).
func (s *Store) EraseUserRows(ctx context.Context, userID string) error {
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.Delete(tableLimits, spanner.Key{userID}),
			spanner.Delete(tableFlagged, spanner.Key{userID}),
		})
	})
	if err != nil {
		return fmt.Errorf("reactionstore.EraseUserRows: %w", err)
	}
	return nil
}
