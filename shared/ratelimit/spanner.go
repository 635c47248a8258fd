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
	l := &UserLimits{table: table, limit: limit, tats: map[string]time.Time{}, changed: map[string]bool{}}
	if limit.PerMinute <= 0 {
		return l, nil
	}
	err := tx.Read(ctx, table, spanner.KeySetFromKeys(users...), []string{"UserId", "Tat"}).Do(func(r *spanner.Row) error {
		var u string
		var t time.Time
		if err := r.Columns(&u, &t); err != nil {
			return err
		}
		l.tats[u] = t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read rate limits: %w", err)
	}
	return l, nil
}

// Allow admits one change of user at now, or says how long to wait.
func (l *UserLimits) Allow(user string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l.limit.PerMinute <= 0 {
		return true, 0
	}
	next, ok, wait := l.limit.Allow(l.tats[user], now)
	if !ok {
		return false, wait
	}
	l.tats[user] = next
	l.changed[user] = true
	return true, 0
}

// Mutations write back the timestamps that Allow moved.
func (l *UserLimits) Mutations() []*spanner.Mutation {
	var ms []*spanner.Mutation
	for u := range l.changed {
		ms = append(ms, spanner.InsertOrUpdate(l.table, []string{"UserId", "Tat"}, []any{u, l.tats[u]}))
	}
	return ms
}
