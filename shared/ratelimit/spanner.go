package ratelimit

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// UserLimits is a per-user rate limit of counted changes (GCRA:
// one GCRA timestamp per user) kept in a Spanner table of (UserId, Tat) and
// checked in the read-write transaction that records the changes: read the
// users' timestamps with ReadUserLimits, admit each change with Allow, and
// buffer Mutations with the changes. A PerMinute of 0 is no limit (and no
// read or write).
type UserLimits struct {
	table   string
	limit   GCRA
	tats    map[string]time.Time
	changed map[string]bool
}

// ReadUserLimits reads the timestamps of users (keys of one user id each)
// from table in tx.
func ReadUserLimits(ctx context.Context, tx *spanner.ReadWriteTransaction, table string, limit GCRA, users []spanner.Key) (*UserLimits, error) {
	tats := map[string]time.Time{}
	if limit.PerMinute <= 0 {
		return NewUserLimits(table, limit, tats), nil
	}
	err := tx.Read(ctx, table, spanner.KeySetFromKeys(users...), []string{"UserId", "Tat"}).Do(func(r *spanner.Row) error {
		var u string
		var t time.Time
		if err := r.Columns(&u, &t); err != nil {
			return err
		}
		tats[u] = t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read rate limits: %w", err)
	}
	return NewUserLimits(table, limit, tats), nil
}

// NewUserLimits are the limits of table from timestamps tats (by user id)
// that the caller read with the other columns of its rows.
func NewUserLimits(table string, limit GCRA, tats map[string]time.Time) *UserLimits {
	return &UserLimits{table: table, limit: limit, tats: tats, changed: map[string]bool{}}
}

// Allow admits one change of user at now, or says how long to wait.
func (l *UserLimits) Allow(user string, now time.Time) (ok bool, retryAfter time.Duration) {
	return l.AllowUnder(l.limit, user, now)
}

// AllowUnder is Allow under another limit than the table's, over the same
// timestamp: a stricter limit for some users.
func (l *UserLimits) AllowUnder(limit GCRA, user string, now time.Time) (ok bool, retryAfter time.Duration) {
	if limit.PerMinute <= 0 {
		return true, 0
	}
	next, ok, wait := limit.Allow(l.tats[user], now)
	if !ok {
		return false, wait
	}
	l.tats[user] = next
	l.changed[user] = true
	return true, 0
}

// TAT is user's timestamp as Allow left it (zero when the user has none).
func (l *UserLimits) TAT(user string) time.Time { return l.tats[user] }

// Mutations write back the timestamps that Allow moved.
func (l *UserLimits) Mutations() []*spanner.Mutation {
	var ms []*spanner.Mutation
	for u := range l.changed {
		ms = append(ms, spanner.InsertOrUpdate(l.table, []string{"UserId", "Tat"}, []any{u, l.tats[u]}))
	}
	return ms
}
