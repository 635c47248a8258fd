package reactionstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/moderation"
)

// timeShards is the number of TimeShard values (060_manipulation.sql).
const timeShards = 16

// ErrTooManyRows: a time range holds more changed reactions than the caller
// allowed; it asks again for a shorter range.
var ErrTooManyRows = errors.New("reactionstore: too many reactions in the range")

// Changed returns the current reactions whose last change lies in [from,
// to): one query over the ReactionsByTime index (each TimeShard's range of
// the times), none of the table. More than maxRows is ErrTooManyRows.
func (s *Store) Changed(ctx context.Context, from, to time.Time, maxRows int) ([]moderation.Reaction, error) {
	shards := make([]int64, timeShards)
	for i := range shards {
		shards[i] = int64(i)
	}
	stmt := spanner.Statement{
		SQL: `SELECT UserId, ContentId, Reaction, UpdateTime
FROM Reactions@{FORCE_INDEX=ReactionsByTime}
WHERE TimeShard IN UNNEST(@shards) AND UpdateTime >= @from AND UpdateTime < @to`,
		Params: map[string]any{"shards": shards, "from": from, "to": to},
	}
	var out []moderation.Reaction
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		if len(out) >= maxRows {
			return ErrTooManyRows
		}
		var x moderation.Reaction
		if err := r.Columns(&x.UserID, &x.ContentID, &x.Reaction, &x.At); err != nil {
			return err
		}
		out = append(out, x)
		return nil
	})
	if errors.Is(err, ErrTooManyRows) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("reactionstore.Changed: %w", err)
	}
	return out, nil
}

// FirstSeen returns when each of users was first seen: the creation of
// their earliest reaction row. A user with a row older than the CreateTime
// column (NULL) is left out, as is one without rows: both count as
// established. It reads every reaction row of the users (their key
// prefixes), so the job asks only for the members of groups it found.
func (s *Store) FirstSeen(ctx context.Context, users []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(users) == 0 {
		return out, nil
	}
	stmt := spanner.Statement{
		SQL: `SELECT UserId, MIN(CreateTime), COUNTIF(CreateTime IS NULL)
FROM Reactions WHERE UserId IN UNNEST(@users) GROUP BY UserId`,
		Params: map[string]any{"users": users},
	}
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var u string
		var first spanner.NullTime
		var unknown int64
		if err := r.Columns(&u, &first, &unknown); err != nil {
			return err
		}
		if first.Valid && unknown == 0 {
			out[u] = first.Time
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reactionstore.FirstSeen: %w", err)
	}
	return out, nil
}
