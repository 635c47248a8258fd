package moderationstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/moderation"
)

// Tables of the flags (FlaggedUsers, read by the reaction store in its own
// transactions too) and of the detection jobs' watermarks.
const (
	tableFlagged    = "FlaggedUsers"
	tableWatermarks = "JobWatermarks"
)

// SetFlagged records a moderator's decision on accounts, flag or unflag, and
// returns how many changed state. The moderator passes the gate (revoked:
// moderation.ErrRevoked; over the rate: *errs.RateLimitedError) and
// the decision is written to the audit trail, one entry per account, in the
// same transaction. Flagged accounts keep their reactions; reconciliation
// stops (or resumes) counting them, finding the affected items through the
// rows' UpdateTime. The decision is recorded (Reason moderator) even where
// the state does not change — an unflag of an account never flagged, a flag
// of one the job flagged — so that the detection job does not override it:
// a flag never, an unflag for the store's unflag protection from this
// decision on.
func (s *Store) SetFlagged(ctx context.Context, d moderation.Decision) (int, error) {
	var changed int
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		changed = 0
		now := s.now().UTC()
		ms, err := s.gate.Admit(ctx, tx, d.Moderator, now)
		if err != nil {
			return err
		}
		cur, err := readFlags(ctx, tx, d.UserIDs)
		if err != nil {
			return err
		}
		action := moderation.ActionUnflag
		if d.Flagged {
			action = moderation.ActionFlag
		}
		seen := map[string]bool{}
		for _, u := range d.UserIDs {
			if seen[u] {
				continue
			}
			seen[u] = true
			c, has := cur[u]
			cols := []string{"UserId", "Flagged", "Reason", "UpdateTime"}
			vals := []any{u, d.Flagged, string(moderation.ByModerator), spanner.CommitTimestamp}
			switch {
			case d.Flagged && (!has || !c.flagged):
				cols, vals = append(cols, "FlaggedAt", "Evidence"), append(vals, now, nil)
			case !d.Flagged:
				cols, vals = append(cols, "FlaggedAt", "Evidence"), append(vals, nil, nil)
			}
			if c.flagged != d.Flagged {
				changed++
			}
			ms = append(ms, spanner.InsertOrUpdate(tableFlagged, cols, vals))
			ms = append(ms, Record(moderation.Entry{
				Action: action, Actor: d.Moderator, ActorKind: moderation.ActorModerator, UserID: u,
				Reason: d.Reason, Changed: c.flagged != d.Flagged,
			})...)
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return 0, fmt.Errorf("moderationstore.SetFlagged: %w", err)
	}
	return changed, nil
}

type flagRow struct {
	flagged bool
	reason  moderation.Reason
	updated time.Time
}

// readFlags reads the flag rows of users; a row without a Reason predates
// it and was a moderator's.
func readFlags(ctx context.Context, tx *spanner.ReadWriteTransaction, users []string) (map[string]flagRow, error) {
	keys := make([]spanner.Key, len(users))
	for i, u := range users {
		keys[i] = spanner.Key{u}
	}
	out := map[string]flagRow{}
	err := tx.Read(ctx, tableFlagged, spanner.KeySetFromKeys(keys...), []string{"UserId", "Flagged", "Reason", "UpdateTime"}).Do(func(r *spanner.Row) error {
		var u string
		var f bool
		var reason spanner.NullString
		var updated time.Time
		if err := r.Columns(&u, &f, &reason, &updated); err != nil {
			return err
		}
		row := flagRow{flagged: f, reason: moderation.ByModerator, updated: updated}
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
var ErrWatermarkMoved = errors.New("moderationstore: the watermark moved")

// FlagGroups flags the members of groups automatically, with their group's
// evidence, and moves the job's watermark from `from` to `to`, in one
// transaction: a run killed before it commits leaves both for the next run
// to redo. An account flagged already, or unflagged by a moderator within
// the store's unflag protection, is left as it is. Each flag is written to
// the audit trail (actor moderation.DetectorGroups) in the same
// transaction. It returns how many accounts it flagged.
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
		if ms, flagged, err = s.automaticFlags(ctx, tx, groups, now, moderation.DetectorGroups); err != nil {
			return err
		}
		ms = append(ms, spanner.InsertOrUpdate(tableWatermarks, []string{"Name", "Watermark", "UpdateTime"}, []any{job, to, spanner.CommitTimestamp}))
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return 0, fmt.Errorf("moderationstore.FlagGroups: %w", err)
	}
	return flagged, nil
}

// FlagAccounts flags the members of groups automatically, with their
// group's evidence, outside any job's watermark (ApplyViews' view velocity
// check; actor moderation.DetectorViews in the audit trail). As in
// FlagGroups, a flagged account or one under a moderator's unflag
// protection is left as it is, so flagging again changes nothing. It
// returns how many accounts it flagged.
func (s *Store) FlagAccounts(ctx context.Context, groups []moderation.Group) (int, error) {
	var flagged int
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		ms, n, err := s.automaticFlags(ctx, tx, groups, s.now().UTC(), moderation.DetectorViews)
		if err != nil {
			return err
		}
		flagged = n
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return 0, fmt.Errorf("moderationstore.FlagAccounts: %w", err)
	}
	return flagged, nil
}

// automaticFlags are the writes of the automatic flags (by the detector
// actor) of groups' members that no flag row protects, with their audit
// entries, and how many accounts they flag.
func (s *Store) automaticFlags(ctx context.Context, tx *spanner.ReadWriteTransaction, groups []moderation.Group, now time.Time, actor string) ([]*spanner.Mutation, int, error) {
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
		ev := g.Evidence
		enc, why := ev.Encode(), ev.Summary()
		for _, u := range g.Members {
			if c, has := cur[u]; done[u] || has && moderation.Protected(c.flagged, c.updated, now, s.unflagProtection) {
				continue
			}
			done[u] = true
			ms = append(ms, spanner.InsertOrUpdate(tableFlagged,
				[]string{"UserId", "Flagged", "Reason", "FlaggedAt", "Evidence", "UpdateTime"},
				[]any{u, true, string(moderation.Automatic), now, enc, spanner.CommitTimestamp}))
			ms = append(ms, Record(moderation.Entry{
				Action: moderation.ActionFlag, Actor: actor, ActorKind: moderation.ActorAutomatic, UserID: u,
				Reason: why, Changed: true, Evidence: &ev,
			})...)
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
		return time.Time{}, fmt.Errorf("moderationstore.Watermark: %w", err)
	}
	var w time.Time
	if err := row.Columns(&w); err != nil {
		return time.Time{}, fmt.Errorf("moderationstore.Watermark: %w", err)
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
		return nil, nil, fmt.Errorf("moderationstore.ListFlagged: %w", err)
	}
	if len(out) <= limit {
		return out, nil, nil
	}
	return out[:limit], &cursors[limit-1], nil
}
