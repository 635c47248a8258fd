// Package moderationstore keeps moderation in Spanner: the flagged
// accounts (a moderator's flags and unflags, the detectors' automatic flags
// with the detection job's watermark, their listing), the audit trail, and
// the guard of moderation calls: the revocation check and the
// per-moderator rate limit that every moderation call passes in its own
// transaction (Gate), the trail's entries written in the transaction of the
// action (Record), and the operators' revocations.
//
// A spam mark stays in the comment store: it removes comments, and their
// tallies and counter deltas commit in its transaction (commentstore
// passes the Gate and Records the mark there). The reaction store reads
// FlaggedUsers in its own transactions: a flagged account's reaction is
// written uncounted, and flag changes move the reaction tallies
// (reactionstore.ApplyFlags).
package moderationstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/spannerdb"
)

const (
	tableLog         = "ModerationLog"
	indexLogByTime   = "ModerationLogByTime"
	indexLogByVideo  = "ModerationLogByVideo"
	tableRevocations = "ModeratorRevocations"
	tableLimits      = "ModeratorRateLimits"
)

// Gate admits a moderator's call: refused (moderation.ErrRevoked) while an
// operator's revocation of the moderator stands, limited to a number of
// calls a minute per moderator (a *errs.RateLimitedError beyond).
// Both are read in the transaction of the call, so a revocation committed
// before it refuses it, on every instance. The zero Gate checks
// revocations and limits nothing.
type Gate struct{ limit ratelimit.GCRA }

// NewGate limits each moderator to perMinute calls a minute (≤ 0: no limit).
func NewGate(perMinute int) Gate { return Gate{limit: ratelimit.GCRA{PerMinute: max(perMinute, 0)}} }

// Admit checks one call of moderatorID at now in tx and returns the
// mutations that record it against the limit.
func (g Gate) Admit(ctx context.Context, tx *spanner.ReadWriteTransaction, moderatorID string, now time.Time) ([]*spanner.Mutation, error) {
	_, err := tx.ReadRow(ctx, tableRevocations, spanner.Key{moderatorID}, []string{"UserId"})
	switch {
	case err == nil:
		return nil, moderation.ErrRevoked
	case spanner.ErrCode(err) != codes.NotFound:
		return nil, fmt.Errorf("read revocation: %w", err)
	}
	limits, err := ratelimit.ReadUserLimits(ctx, tx, tableLimits, g.limit, []spanner.Key{{moderatorID}})
	if err != nil {
		return nil, err
	}
	if ok, wait := limits.Allow(moderatorID, now); !ok {
		return nil, &errs.RateLimitedError{What: "moderation calls", RetryAfter: wait}
	}
	return limits.Mutations(), nil
}

// Record is the inserts of entries into the trail, at the commit timestamp
// of the transaction that buffers them (their Time and ID are ignored).
func Record(entries ...moderation.Entry) []*spanner.Mutation {
	ms := make([]*spanner.Mutation, 0, len(entries))
	for _, e := range entries {
		var evidence spanner.NullString
		if e.Evidence != nil {
			evidence = spanner.NullString{StringVal: e.Evidence.Encode(), Valid: true}
		}
		ms = append(ms, spanner.Insert(tableLog,
			[]string{"UserId", "Time", "EntryId", "Action", "Actor", "ActorKind", "CommentId", "VideoId", "Reason", "Changed", "Evidence"},
			[]any{e.UserID, spanner.CommitTimestamp, newEntryID(), string(e.Action), e.Actor, string(e.ActorKind),
				nullString(e.CommentID), nullString(e.VideoID), e.Reason, e.Changed, evidence}))
	}
	return ms
}

func newEntryID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func nullString(s string) spanner.NullString { return spanner.NullString{StringVal: s, Valid: s != ""} }

// Store keeps the flags, reads the trail, admits the calls that only
// read, and keeps the revocations.
type Store struct {
	db   *spannerdb.DB
	gate Gate
	now  func() time.Time
	// unflagProtection is how long a moderator's unflag keeps the
	// detectors from flagging the account.
	unflagProtection time.Duration
}

// New returns the store; gate admits moderators' calls.
func New(db *spannerdb.DB, gate Gate) *Store {
	return &Store{db: db, gate: gate, now: time.Now, unflagProtection: config.Defaults().Moderation.UnflagProtection}
}

// ProtectUnflags sets how long a moderator's unflag keeps the detectors
// from flagging the account again (default
// UNFLAG_PROTECTION's); it returns s.
func (s *Store) ProtectUnflags(d time.Duration) *Store {
	s.unflagProtection = d
	return s
}

// Admit passes a moderator's call that writes nothing else through the
// gate, in a transaction of its own.
func (s *Store) Admit(ctx context.Context, moderatorID string) error {
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		ms, err := s.gate.Admit(ctx, tx, moderatorID, s.now().UTC())
		if err != nil {
			return err
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return fmt.Errorf("moderationstore.Admit: %w", err)
	}
	return nil
}

const entryColumns = "UserId, Time, EntryId, Action, Actor, ActorKind, CommentId, VideoId, Reason, Changed, Evidence"

// List lists the trail's entries that f selects, newest first, up to limit
// after the cursor (nil: from the start), and the cursor of the next page
// (nil at the end): one key range of the table (f.UserID) or of an index.
func (s *Store) List(ctx context.Context, f moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error) {
	from, where := tableLog+"@{FORCE_INDEX="+indexLogByTime+"}", "TRUE"
	params := map[string]any{"limit": int64(limit + 1)}
	switch {
	case f.UserID != "":
		from, where = tableLog, "UserId = @user"
		params["user"] = f.UserID
		if f.VideoID != "" {
			where += " AND VideoId = @video"
			params["video"] = f.VideoID
		}
	case f.VideoID != "":
		from = tableLog + "@{FORCE_INDEX=" + indexLogByVideo + ", spanner_emulator.disable_query_null_filtered_index_check=true}"
		where = "VideoId = @video"
		params["video"] = f.VideoID
	}
	if after != nil {
		where += " AND (Time < @at OR (Time = @at AND EntryId < @id))"
		params["at"], params["id"] = after.Time, after.ID
	}
	stmt := spanner.Statement{
		SQL:    "SELECT " + entryColumns + " FROM " + from + " WHERE " + where + " ORDER BY Time DESC, EntryId DESC LIMIT @limit",
		Params: params,
	}
	var out []moderation.Entry
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		e, err := scanEntry(r)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("moderationstore.List: %w", err)
	}
	if len(out) <= limit {
		return out, nil, nil
	}
	last := out[limit-1]
	return out[:limit], &moderation.EntryCursor{Time: last.Time, ID: last.ID}, nil
}

func scanEntry(r *spanner.Row) (moderation.Entry, error) {
	var (
		e                  moderation.Entry
		action, kind       string
		comment, video, ev spanner.NullString
	)
	if err := r.Columns(&e.UserID, &e.Time, &e.ID, &action, &e.Actor, &kind, &comment, &video, &e.Reason, &e.Changed, &ev); err != nil {
		return moderation.Entry{}, err
	}
	e.Action, e.ActorKind = moderation.Action(action), moderation.ActorKind(kind)
	e.CommentID, e.VideoID = comment.StringVal, video.StringVal
	if ev.Valid {
		d, err := moderation.DecodeEvidence(ev.StringVal)
		if err != nil {
			return moderation.Entry{}, err
		}
		e.Evidence = &d
	}
	return e, nil
}

// Revocation is an operator's revocation of a moderator's role.
type Revocation struct {
	UserID    string
	RevokedBy string
	Reason    string
	Time      time.Time
}

// Revoke revokes the moderator role of userID from the next moderation call
// on, and records it in the trail (by: the operator). It reports whether
// the role was not revoked already.
func (s *Store) Revoke(ctx context.Context, userID, by, reason string) (bool, error) {
	var changed bool
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		revoked, err := isRevoked(ctx, tx, userID)
		if err != nil {
			return err
		}
		changed = !revoked
		ms := Record(moderation.Entry{Action: moderation.ActionRevoke, Actor: by, ActorKind: moderation.ActorOperator, UserID: userID, Reason: reason, Changed: changed})
		ms = append(ms, spanner.InsertOrUpdate(tableRevocations, []string{"UserId", "RevokedBy", "Reason", "RevokeTime"},
			[]any{userID, by, reason, spanner.CommitTimestamp}))
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return false, fmt.Errorf("moderationstore.Revoke: %w", err)
	}
	return changed, nil
}

// Restore gives a revoked moderator the role back (their token must still
// carry the moderator claim), and records it in the trail. It reports
// whether the role was revoked.
func (s *Store) Restore(ctx context.Context, userID, by, reason string) (bool, error) {
	var changed bool
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		revoked, err := isRevoked(ctx, tx, userID)
		if err != nil {
			return err
		}
		changed = revoked
		ms := Record(moderation.Entry{Action: moderation.ActionRestore, Actor: by, ActorKind: moderation.ActorOperator, UserID: userID, Reason: reason, Changed: changed})
		ms = append(ms, spanner.Delete(tableRevocations, spanner.Key{userID}))
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return false, fmt.Errorf("moderationstore.Restore: %w", err)
	}
	return changed, nil
}

func isRevoked(ctx context.Context, tx *spanner.ReadWriteTransaction, userID string) (bool, error) {
	_, err := tx.ReadRow(ctx, tableRevocations, spanner.Key{userID}, []string{"UserId"})
	switch {
	case err == nil:
		return true, nil
	case spanner.ErrCode(err) == codes.NotFound:
		return false, nil
	default:
		return false, fmt.Errorf("read revocation: %w", err)
	}
}

// Revocations lists the revocations in force, by user id.
func (s *Store) Revocations(ctx context.Context) ([]Revocation, error) {
	var out []Revocation
	err := s.db.Single().Read(ctx, tableRevocations, spanner.AllKeys(), []string{"UserId", "RevokedBy", "Reason", "RevokeTime"}).Do(func(r *spanner.Row) error {
		var v Revocation
		if err := r.Columns(&v.UserID, &v.RevokedBy, &v.Reason, &v.Time); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("moderationstore.Revocations: %w", err)
	}
	return out, nil
}
