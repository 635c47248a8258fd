// Package ratelimit holds the per-user rate limits: GCRA, whose state
// (UserLimits, one timestamp per user in a Spanner table) the caller reads
// and writes in its own transaction (comments, moderators' calls), and
// Bigtable, a log of each user's actions of the last 60 seconds decided by
// one conditional mutation per action (history, deletions, settings) or two
// calls per batch of actions (reactions, through their group commit), which
// Degrading replaces by a per-instance limit (Local) while Bigtable does not
// answer. Each holds its limit over any 60 seconds, not only over aligned
// minutes (docs/design/ratelimits.md).
// Which limits are on is config.Config.UserLimits.
package ratelimit

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/errs"
)

func unavailable(op string, err error) error { return errs.Backend(op, err) }

// The rate_limits table (topology.json). Every admitted action is one cell
// of its user's row, timestamped with its time; the family's GC policy (max
// age one hour) removes the cells long after they leave the window.
const (
	Table           = "rate_limits"
	rateLimitFamily = "n"
)

// Bigtable admits at most a limit of actions of one kind per user in any 60
// seconds, counted in Bigtable so that the limit holds across every
// function instance. Each user has one row per kind,
//
//	<kind>#<user prefix>
//
// and each admitted action one cell in it, in a column of its own, whose
// timestamp is the action's time: an action at t is admitted when the row
// holds fewer than the limit cells later than t-60s. Counting the actions
// of the last 60 seconds, rather than of the current minute, is what keeps
// any 60 seconds to the limit; a count per minute admits up to twice it
// across a minute's end.
//
// Allow decides an action with one conditional mutation
// (CheckAndMutateRow): "unless the row holds the limit in the window, add
// my cell", atomic on the row, so one user's concurrent actions are decided
// one after the other and exactly the limit is admitted. AllowMany decides
// a batch of actions of many users in two calls whatever its size (and a
// third when it refuses any): each action writes its cell (one MutateRows),
// the rows are read back (one ReadRows), and the actions of a row over the
// limit have their cells deleted, so a refusal never holds the window.
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

// rateLimitKey is the row of kind's actions of the user. The user part is
// base64url and '#', outside its alphabet, as in history's row keys: no
// user's row can be a prefix of another's.
func rateLimitKey(kind, userID string) string {
	return kind + "#" + base64.RawURLEncoding.EncodeToString([]byte(userID)) + "#"
}

// window is the filter of the cells of actions that count against an
// action at ts: those of the last 60 seconds (t-60s, t], and any later
// (another instance's clock ahead of this one).
func window(ts bigtable.Timestamp) bigtable.Filter {
	return bigtable.ChainFilters(
		bigtable.FamilyFilter(rateLimitFamily),
		bigtable.TimestampRangeFilterMicros(ts-bigtable.Timestamp(time.Minute/time.Microsecond)+1000, 0),
	)
}

// Allow counts one action of the user and reports how long to wait when it
// is over the limit (until enough of the window's actions leave it). A nil
// limiter admits everything.
func (l *Bigtable) Allow(ctx context.Context, userID string) (time.Duration, error) {
	if l == nil {
		return 0, nil
	}
	now := l.now().UTC()
	ts := bigtable.Time(now).TruncateToMilliseconds()
	key := rateLimitKey(l.kind, userID)
	if l.limit <= 0 {
		return l.retryAfter(now, nil), nil
	}
	add := bigtable.NewMutation()
	add.Set(rateLimitFamily, actionColumn(), ts, nil)
	// The predicate matches when the window holds limit cells or more.
	full := bigtable.ChainFilters(window(ts), bigtable.CellsPerRowOffsetFilter(int(l.limit-1)))
	var refused bool
	if err := l.t.Apply(ctx, key, bigtable.NewCondMutation(full, nil, add), bigtable.GetCondMutationResult(&refused)); err != nil {
		return 0, unavailable("rate limit", err)
	}
	if !refused {
		return 0, nil
	}
	var times []bigtable.Timestamp
	row, err := l.t.ReadRow(ctx, key, bigtable.RowFilter(bigtable.ChainFilters(window(ts), bigtable.StripValueFilter())))
	if err != nil {
		return 0, unavailable("rate limit", err)
	}
	for _, c := range row[rateLimitFamily] {
		times = append(times, c.Timestamp)
	}
	return l.retryAfter(now, times), nil
}

// AllowMany counts one action of each of userIDs (a user may appear more
// than once) and reports for each how long to wait, zero when admitted: two
// Bigtable calls for the whole batch, where Allow is one call per action.
//
// Every action is written before its window is read, so the count an
// action reads includes itself and every action written before it: of the
// actions admitted in any 60 seconds, the last one written read them all,
// and it was admitted only if they were at most the limit. The limit
// therefore holds across batches and instances (reads after writes are
// consistent through the single-cluster profile the limiter requires);
// when many actions of one user are written before any is read, fewer than
// the limit may be admitted. A user's actions in one batch are admitted or
// refused together.
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
	var columns [][]string // each row's columns of this batch
	for i, u := range userIDs {
		k := rateLimitKey(l.kind, u)
		j, ok := index[k]
		if !ok {
			j = len(keys)
			index[k] = j
			keys = append(keys, k)
			muts = append(muts, bigtable.NewMutation())
			columns = append(columns, nil)
		}
		rowOf[i] = j
		col := actionColumn()
		columns[j] = append(columns[j], col)
		muts[j].Set(rateLimitFamily, col, ts, nil)
	}
	if err := applyBulk(ctx, l.t, keys, muts); err != nil {
		return nil, err
	}
	counted := make(map[string][]bigtable.ReadItem, len(keys))
	err := l.t.ReadRows(ctx, bigtable.RowList(keys), func(r bigtable.Row) bool {
		counted[r.Key()] = r[rateLimitFamily]
		return true
	}, bigtable.RowFilter(bigtable.ChainFilters(
		window(ts),
		bigtable.StripValueFilter(),
		// Enough cells to tell whether the window is over the limit and
		// when it will not be; a row flooded past this is refused all the
		// same.
		bigtable.CellsPerRowLimitFilter(int(min(4*l.limit+int64(len(userIDs)), 1<<20))),
	)))
	if err != nil {
		return nil, unavailable("rate limit", err)
	}
	var refusedKeys []string
	var refusals []*bigtable.Mutation
	rowWait := make([]time.Duration, len(keys))
	for j, k := range keys {
		cells, ok := counted[k]
		if !ok {
			return nil, fmt.Errorf("ratelimit: window row %q written but not read back", k)
		}
		if int64(len(cells)) <= l.limit {
			continue
		}
		// Refused: the batch's cells go, and the wait is the others'.
		mine := map[string]bool{}
		del := bigtable.NewMutation()
		for _, col := range columns[j] {
			mine[rateLimitFamily+":"+col] = true
			del.DeleteCellsInColumn(rateLimitFamily, col)
		}
		var others []bigtable.Timestamp
		for _, c := range cells {
			if !mine[c.Column] {
				others = append(others, c.Timestamp)
			}
		}
		rowWait[j] = l.retryAfter(now, others)
		refusedKeys = append(refusedKeys, k)
		refusals = append(refusals, del)
	}
	if len(refusedKeys) > 0 {
		// A cell left behind only refuses more until it leaves the window.
		if err := applyBulk(ctx, l.t, refusedKeys, refusals); err != nil {
			slog.WarnContext(ctx, "ratelimit: refused actions not removed from their window", "kind", l.kind, "error", err.Error())
		}
	}
	for i := range userIDs {
		waits[i] = rowWait[rowOf[i]]
	}
	return waits, nil
}

// retryAfter is how long a refused action at now waits before another is
// admitted, given the times of the window's other actions: until all but
// limit-1 of them are 60 seconds old. At least a millisecond, so that a
// refusal is never a zero (admitted) wait, and at most 60 seconds.
func (l *Bigtable) retryAfter(now time.Time, times []bigtable.Timestamp) time.Duration {
	if l.limit <= 0 {
		return time.Minute
	}
	slices.Sort(times)
	wait := time.Millisecond
	if leave := len(times) - int(l.limit) + 1; leave > 0 {
		wait = times[leave-1].Time().Add(time.Minute).Sub(now)
	}
	return min(max(wait, time.Millisecond), time.Minute)
}

func applyBulk(ctx context.Context, t *bigtable.Table, keys []string, muts []*bigtable.Mutation) error {
	failed, err := t.ApplyBulk(ctx, keys, muts)
	if err == nil {
		for _, e := range failed {
			if e != nil {
				err = e
				break
			}
		}
	}
	if err != nil {
		return unavailable("rate limit", err)
	}
	return nil
}

// actionColumn is a column of its own for one action: random,
// so that actions written at the same millisecond are distinct cells.
func actionColumn() string { return "a" + strconv.FormatUint(rand.Uint64(), 36) }
