package reactionstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/moderation"
)

// SetFlagged records a moderator's decision on accounts, flag or unflag, and
// returns how many changed state. Flagged accounts keep their reactions;
// reconciliation stops (or resumes) counting them, finding the affected
// items through the rows' UpdateTime. The decision is recorded (Reason
// moderator) even where the state does not change — an unflag of an account
// never flagged, a flag of one the job flagged — so that the detection job
// never overrides it.
func (s *Store) SetFlagged(ctx context.Context, userIDs []string, flagged bool) (int, error) {
	var changed int
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		changed = 0
		now := s.now().UTC()
		cur, err := readFlags(ctx, tx, userIDs)
		if err != nil {
			return err
		}
		var ms []*spanner.Mutation
		seen := map[string]bool{}
		for _, u := range userIDs {
			c, has := cur[u]
			if seen[u] || (c.flagged == flagged && c.reason == moderation.ByModerator) {
				continue
			}
			seen[u] = true
			cols := []string{"UserId", "Flagged", "Reason", "UpdateTime"}
			vals := []any{u, flagged, string(moderation.ByModerator), spanner.CommitTimestamp}
			switch {
			case flagged && (!has || !c.flagged):
				cols, vals = append(cols, "FlaggedAt", "Evidence"), append(vals, now, nil)
			case !flagged:
				cols, vals = append(cols, "FlaggedAt", "Evidence"), append(vals, nil, nil)
			}
			if c.flagged != flagged {
				changed++
			}
			ms = append(ms, spanner.InsertOrUpdate(tableFlagged, cols, vals))
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return 0, fmt.Errorf("reactionstore.SetFlagged: %w", err)
	}
	return changed, nil
}

type flagRow struct {
	flagged bool
	reason  moderation.Reason
}

// readFlags reads the flag rows of users; a row without a Reason predates
// it and was a moderator's.
func readFlags(ctx context.Context, tx *spanner.ReadWriteTransaction, users []string) (map[string]flagRow, error) {
	keys := make([]spanner.Key, len(users))
	for i, u := range users {
		keys[i] = spanner.Key{u}
	}
	out := map[string]flagRow{}
	err := tx.Read(ctx, tableFlagged, spanner.KeySetFromKeys(keys...), []string{"UserId", "Flagged", "Reason"}).Do(func(r *spanner.Row) error {
		var u string
		var f bool
		var reason spanner.NullString
		if err := r.Columns(&u, &f, &reason); err != nil {
			return err
		}
		row := flagRow{flagged: f, reason: moderation.ByModerator}
		if reason.Valid {
			row.reason = moderation.Reason(reason.StringVal)
		}
		out[u] = row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read flagged users: %w", err)
	}
	return out, nil
}

// ErrWatermarkMoved: another run of the job moved the watermark since this
// one read it; this run's findings are not recorded (that run's are).
var ErrWatermarkMoved = errors.New("reactionstore: the watermark moved")

// FlagGroups flags the members of groups automatically, with their group's
// evidence, and moves the job's watermark from `from` to `to`, in one
// transaction: a run killed before it commits leaves both for the next run
// to redo. An account that has any flag row — flagged already, or a
// moderator's decision either way — is left as it is. It returns how many
// accounts it flagged.
func (s *Store) FlagGroups(ctx context.Context, groups []moderation.Group, job string, from, to time.Time) (int, error) {
	var flagged int
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		flagged = 0
		now := s.now().UTC()
		row, err := tx.ReadRow(ctx, tableWatermarks, spanner.Key{job}, []string{"Watermark"})
		switch {
		case spanner.ErrCode(err) == codes.NotFound:
			if !from.IsZero() {
				return ErrWatermarkMoved
			}
		case err != nil:
			return fmt.Errorf("read watermark: %w", err)
		default:
			var w time.Time
			if err := row.Columns(&w); err != nil {
				return err
			}
			if !w.Equal(from) {
				return ErrWatermarkMoved
			}
		}
		var ms []*spanner.Mutation
		if ms, flagged, err = automaticFlags(ctx, tx, groups, now); err != nil {
			return err
		}
		ms = append(ms, spanner.InsertOrUpdate(tableWatermarks, []string{"Name", "Watermark", "UpdateTime"}, []any{job, to, spanner.CommitTimestamp}))
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return 0, fmt.Errorf("reactionstore.FlagGroups: %w", err)
	}
	return flagged, nil
}

// FlagAccounts flags the members of groups automatically, with their
// group's evidence, outside any job's watermark (ApplyViews' view velocity
// check). As in FlagGroups, an account that has any flag row is left as it
// is, so flagging again changes nothing. It returns how many accounts it
// flagged.
func (s *Store) FlagAccounts(ctx context.Context, groups []moderation.Group) (int, error) {
	var flagged int
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		ms, n, err := automaticFlags(ctx, tx, groups, s.now().UTC())
		if err != nil {
			return err
		}
		flagged = n
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return 0, fmt.Errorf("reactionstore.FlagAccounts: %w", err)
	}
	return flagged, nil
}

// automaticFlags are the inserts of the automatic flags of groups' members
// that have no flag row, and how many accounts they flag.
func automaticFlags(ctx context.Context, tx *spanner.ReadWriteTransaction, groups []moderation.Group, now time.Time) ([]*spanner.Mutation, int, error) {
	var users []string
	for _, g := range groups {
		users = append(users, g.Members...)
	}
	cur := map[string]flagRow{}
	if len(users) > 0 {
		var err error
		if cur, err = readFlags(ctx, tx, users); err != nil {
			return nil, 0, err
		}
	}
	var ms []*spanner.Mutation
	done := map[string]bool{}
	for _, g := range groups {
		ev := g.Evidence.Encode()
		for _, u := range g.Members {
			if _, has := cur[u]; has || done[u] {
				continue
			}
			done[u] = true
			ms = append(ms, spanner.Insert(tableFlagged,
				[]string{"UserId", "Flagged", "Reason", "FlaggedAt", "Evidence", "UpdateTime"},
				[]any{u, true, string(moderation.Automatic), now, ev, spanner.CommitTimestamp}))
		}
	}
	return ms, len(done), nil
}

// Watermark returns how far the job has read; zero before its first run.
func (s *Store) Watermark(ctx context.Context, job string) (time.Time, error) {
	row, err := s.db.Single().ReadRow(ctx, tableWatermarks, spanner.Key{job}, []string{"Watermark"})
	if spanner.ErrCode(err) == codes.NotFound {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reactionstore.Watermark: %w", err)
	}
	var w time.Time
	if err := row.Columns(&w); err != nil {
		return time.Time{}, fmt.Errorf("reactionstore.Watermark: %w", err)
	}
	return w, nil
}

// ListFlagged lists flagged accounts, most recently flagged first, up to
// limit after the cursor (nil: from the start), and the cursor of the next
// page (nil at the end): one range of the FlaggedUsersByTime index.
func (s *Store) ListFlagged(ctx context.Context, after *moderation.Cursor, limit int) ([]moderation.Flag, *moderation.Cursor, error) {
	where := "ListedAt IS NOT NULL"
	params := map[string]any{"limit": int64(limit + 1)}
	if after != nil {
		where += " AND (ListedAt < @at OR (ListedAt = @at AND UserId < @user))"
		params["at"], params["user"] = after.At, after.UserID
	}
	stmt := spanner.Statement{
		SQL: `SELECT UserId, ListedAt, Reason, FlaggedAt, Evidence, UpdateTime
FROM FlaggedUsers@{FORCE_INDEX=FlaggedUsersByTime, spanner_emulator.disable_query_null_filtered_index_check=true}
WHERE ` + where + `
ORDER BY ListedAt DESC, UserId DESC LIMIT @limit`,
		Params: params,
	}
	var out []moderation.Flag
	var cursors []moderation.Cursor
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var (
			f         moderation.Flag
			listed    time.Time
			reason    spanner.NullString
			flaggedAt spanner.NullTime
			evidence  spanner.NullString
			updated   time.Time
		)
		if err := r.Columns(&f.UserID, &listed, &reason, &flaggedAt, &evidence, &updated); err != nil {
			return err
		}
		f.Reason, f.FlaggedAt = moderation.ByModerator, updated
		if reason.Valid {
			f.Reason = moderation.Reason(reason.StringVal)
		}
		if flaggedAt.Valid {
			f.FlaggedAt = flaggedAt.Time
		}
		if evidence.Valid {
			ev, err := moderation.DecodeEvidence(evidence.StringVal)
			if err != nil {
				return err
			}
			f.Evidence = &ev
		}
		out = append(out, f)
		cursors = append(cursors, moderation.Cursor{At: listed, UserID: f.UserID})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reactionstore.ListFlagged: %w", err)
	}
	if len(out) <= limit {
		return out, nil, nil
	}
	return out[:limit], &cursors[limit-1], nil
}
