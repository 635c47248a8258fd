package moderationstore

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/errs"
)

// FlaggedAmong returns which of users are flagged now, by a moderator or
// automatically, in one strong read of their flag rows: the accounts whose
// views stop counting.
func (s *Store) FlaggedAmong(ctx context.Context, users []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(users) == 0 {
		return out, nil
	}
	keys := make([]spanner.Key, len(users))
	for i, u := range users {
		keys[i] = spanner.Key{u}
	}
	err := s.db.Single().Read(ctx, tableFlagged, spanner.KeySetFromKeys(keys...), []string{"UserId", "Flagged"}).Do(func(r *spanner.Row) error {
		var u string
		var f bool
		if err := r.Columns(&u, &f); err != nil {
			return err
		}
		if f {
			out[u] = true
		}
		return nil
	})
	if err != nil {
		return nil, errs.Backend("read flagged users", fmt.Errorf("moderationstore.FlaggedAmong: %w", err))
	}
	return out, nil
}
