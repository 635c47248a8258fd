package reactionstore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/moderation"
)

// indexByItemPart serves a partition of the detection its item parts'
// changed reactions (105_detection_partitions.sql).
const indexByItemPart = "ReactionsByItemPart"

// ScanParts feeds scan the reactions of item parts [lo, hi) whose last
// change lies in [from, to), a part at a time: one Read of the
// ReactionsByItemPart index, a key range per part, rows in key order.
func (s *Store) ScanParts(ctx context.Context, lo, hi int, from, to time.Time, scan *moderation.Scan) error {
	ranges := make([]spanner.KeySet, 0, hi-lo)
	for p := lo; p < hi; p++ {
		ranges = append(ranges, spanner.KeyRange{Start: spanner.Key{int64(p), from}, End: spanner.Key{int64(p), to}, Kind: spanner.ClosedOpen})
	}
	part := int64(-1)
	err := s.db.Single().ReadUsingIndex(ctx, tableReactions, indexByItemPart, spanner.KeySets(ranges...),
		[]string{"ItemPart", "UserId", "ContentId", "Reaction", "UpdateTime"}).Do(func(r *spanner.Row) error {
		var p int64
		var x moderation.Reaction
		if err := r.Columns(&p, &x.UserID, &x.ContentID, &x.Reaction, &x.At); err != nil {
			return err
		}
		if p != part && part >= 0 {
			scan.EndPart()
		}
		part = p
		scan.Add(x)
		return nil
	})
	if err != nil {
		return fmt.Errorf("reactionstore.ScanParts(%d, %d): %w", lo, hi, err)
	}
	return nil
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
