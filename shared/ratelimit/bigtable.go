// Package ratelimit holds the per-user rate limits: GCRA, whose state
// (UserLimits, one timestamp per user in a Spanner table) the caller reads
// and writes in its own transaction (comments, moderators' calls), and
// Bigtable, a fixed window counted by
// one atomic increment per action (history) or two calls per batch of
// actions (reactions by default, through their group commit), which Degrading
// replaces by a per-instance limit (Local) while Bigtable does not answer.
// Which limits are on is config.Config.UserLimits.
package ratelimit

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
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
// Allow counts an action with one atomic increment of the row's count cell
// (ReadModifyWriteRow) that returns the window's new count: no read before
// the write, no transaction to retry, so one user's concurrent actions never
// contend. AllowMany counts a batch of actions of many users in two calls
// whatever its size: each action writes a cell of its own into its window's
// row (one MutateRows), then the rows are read back (one ReadRows), and the
// window's count is the count cell's value plus the other cells. Refused
// actions are counted too, which changes nothing: the window is already
// over the limit.
type Bigtable struct {
	t     *bigtable.Table
	kind  string
	limit int64
	now   func() time.Time
}

// NewBigtable limits kind to limit per minute in client c's rate_limits
// table. The client's app profile must allow single-row transactions
// (host.Clients.BigtableTx).
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

// AllowMany counts one action of each of userIDs (a user may appear more
// than once) and reports for each how long to wait, zero when admitted: two
// Bigtable calls for the whole batch, where Allow is one call per action.
//
// Every action is written before its window is read, so the count an
// action reads includes itself and every action written before it: of the
// actions admitted in a window, the last one written read them all, and it
// was admitted only if they were at most the limit. The limit therefore
// holds across batches and instances (reads after writes are consistent
// through the single-cluster profile the limiter requires). A user's actions
// in one batch are admitted or refused together.
func (l *Bigtable) AllowMany(ctx context.Context, userIDs []string) ([]time.Duration, error) {
	waits := make([]time.Duration, len(userIDs))
	if l == nil || len(userIDs) == 0 {
		return waits, nil
	}
	now := l.now().UTC()
	ts := bigtable.Time(now).TruncateToMilliseconds()
	rowOf := make([]int, len(userIDs)) // action → its row in keys
	index := make(map[string]int, len(userIDs))
	var keys []string
	var muts []*bigtable.Mutation
	for i, u := range userIDs {
		k := rateLimitKey(l.kind, u, now)
		j, ok := index[k]
		if !ok {
			j = len(keys)
			index[k] = j
			keys = append(keys, k)
			muts = append(muts, bigtable.NewMutation())
		}
		rowOf[i] = j
		muts[j].Set(rateLimitFamily, actionColumn(), ts, nil)
	}
	errs, err := l.t.ApplyBulk(ctx, keys, muts)
	if err == nil {
		for _, e := range errs {
			if e != nil {
				err = e
				break
			}
		}
	}
	if err != nil {
		return nil, unavailable("rate limit", err)
	}
	counts := make(map[string]int64, len(keys))
	err = l.t.ReadRows(ctx, bigtable.RowList(keys), func(r bigtable.Row) bool {
		counts[r.Key()] = windowCount(r[rateLimitFamily])
		return true
	}, bigtable.RowFilter(bigtable.ChainFilters(
		bigtable.FamilyFilter(rateLimitFamily),
		bigtable.LatestNFilter(1), // the count cell's newest value
		// Enough cells to tell whether the window is over the limit.
		bigtable.CellsPerRowLimitFilter(int(min(l.limit+1, 1<<20))),
	)))
	if err != nil {
		return nil, unavailable("rate limit", err)
	}
	wait := now.Truncate(time.Minute).Add(time.Minute).Sub(now)
	for i := range userIDs {
		n, ok := counts[keys[rowOf[i]]]
		if !ok {
			return nil, fmt.Errorf("bigtabledb: rate limit: window row %q written but not read back", keys[rowOf[i]])
		}
		if n > l.limit {
			waits[i] = wait
		}
	}
	return waits, nil
}

// actionColumn is a column of its own for one action of AllowMany: random,
// so that actions written at the same millisecond are distinct cells.
func actionColumn() string { return "a" + strconv.FormatUint(rand.Uint64(), 36) }

// windowCount is the number of actions a window's cells hold: the count
// cell's value (Allow's increments) plus one per other cell (AllowMany's
// actions).
func windowCount(cells []bigtable.ReadItem) int64 {
	var n int64
	for _, c := range cells {
		if c.Column == rateLimitFamily+":"+colCount && len(c.Value) == 8 {
			n += int64(binary.BigEndian.Uint64(c.Value))
			continue
		}
		n++
	}
	return n
}
