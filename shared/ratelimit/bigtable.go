// Package ratelimit holds the per-user rate limits: GCRA, whose state the
// caller keeps in its own Spanner transaction (reactions on the Spanner
// store, comments, counted changes), and Bigtable, a fixed window counted by
// one atomic increment (history, reactions by default). Which limits are on
// is config.Config.UserLimits.
package ratelimit

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/errs"
)

func unavailable(op string, err error) error { return errs.Backend(op, err) }

// The rate_limits table (topology.json). Each increment writes a new version
// of the count cell; the family's GC policy (max age one hour) removes a
// window's versions, at most one per action in its minute, within the hour.
const (
	Table           = "rate_limits"
	rateLimitFamily = "n"
	colCount        = "c"
)

// Bigtable admits up to a limit of actions of one kind per user per
// minute, counted in Bigtable so that the limit holds across every function
// instance. Windows are fixed minutes, one row per kind, user and minute:
//
//	<kind>#<user prefix><minute, Unix seconds>
//
// Each action is one atomic increment (ReadModifyWriteRow) that returns the
// window's new count: no read before the write, no transaction to retry, so
// one user's concurrent actions never contend. Refused actions are counted
// too, which changes nothing: the window is already over the limit.
type Bigtable struct {
	t     *bigtable.Table
	kind  string
	limit int64
	now   func() time.Time
}

// NewBigtable limits kind to limit per minute in client c's rate_limits
// table. The client's app profile must allow single-row transactions
// (platform.Clients.BigtableTx).
func NewBigtable(c *bigtable.Client, kind string, limit int) *Bigtable {
	return &Bigtable{t: c.Open(Table), kind: kind, limit: int64(limit), now: time.Now}
}

// rateLimitKey is the row of kind's window of the user that holds at. The
// user part is base64url and '#', outside its alphabet, as in history's row
// keys: no user's rows can be a prefix of another's.
func rateLimitKey(kind, userID string, at time.Time) string {
	return fmt.Sprintf("%s#%s#%d", kind, base64.RawURLEncoding.EncodeToString([]byte(userID)), at.UTC().Truncate(time.Minute).Unix())
}

// Allow counts one action of the user and reports how long to wait (the
// rest of the minute) when it is over the limit. A nil limiter admits
// everything.
func (l *Bigtable) Allow(ctx context.Context, userID string) (time.Duration, error) {
	if l == nil {
		return 0, nil
	}
	now := l.now().UTC()
	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment(rateLimitFamily, colCount, 1)
	row, err := l.t.ApplyReadModifyWrite(ctx, rateLimitKey(l.kind, userID, now), rmw)
	if err != nil {
		return 0, unavailable("rate limit", err)
	}
	cells := row[rateLimitFamily]
	if len(cells) != 1 || len(cells[0].Value) != 8 {
		return 0, fmt.Errorf("ratelimit: unexpected answer %v", row)
	}
	if n := int64(binary.BigEndian.Uint64(cells[0].Value)); n > l.limit {
		return now.Truncate(time.Minute).Add(time.Minute).Sub(now), nil
	}
	return 0, nil
}
