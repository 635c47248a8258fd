package counterstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/views"
)

// Viewer is the signed-in caller of a counts read.
type Viewer struct {
	UserID string
}

// ViewerReaction is the caller's own reaction on an item.
type ViewerReaction struct {
	Reaction string
	Version  int64
}

// Counts is the answer of one counts read.
type Counts struct {
	// Values holds every requested id (zero when unknown), never negative.
	Values map[string]counter.Values
	// Reactions holds the viewer's reactions on the ids that have one.
	Reactions map[string]ViewerReaction
}

// Sources of a row of the counts query.
const (
	srcCounted = 0 // snapshot or shard
	srcPending = 1 // the viewer's own change, not yet counted
	srcViewer  = 2 // the viewer's reaction
)

// Counts reads the counts of ids in one query: each counter's snapshot plus
// its live shards (no counting on read: at most 1 + 64 rows a counter).
//
// Anonymous reads may be up to maxStaleness old (served by the nearest
// replica without waiting for the leader; counts are eventually consistent by
// design). A viewer's read is strong and the same query adds the viewer's
// reactions and the viewer's own pending changes: at the query's one
// timestamp each of the viewer's changes is either counted or still pending
// (the consumer deletes the pending row in the transaction that counts it),
// so each is included exactly once.
func (s *Store) Counts(ctx context.Context, ids []string, viewer *Viewer, maxStaleness time.Duration) (Counts, error) {
	out := Counts{Values: make(map[string]counter.Values, len(ids)), Reactions: map[string]ViewerReaction{}}
	for _, id := range ids {
		out.Values[id] = counter.Values{}
	}
	if len(ids) == 0 {
		return out, nil
	}
	cols := valueList
	sql := fmt.Sprintf(`SELECT CounterKey, %[1]d AS Src, %[2]s, '' AS Reaction, 0 AS Version, Viewers FROM Counters WHERE CounterKey IN UNNEST(@ids)
UNION ALL SELECT CounterKey, %[1]d, %[2]s, '', 0, Viewers FROM CounterShards WHERE CounterKey IN UNNEST(@ids)`, srcCounted, cols)
	params := map[string]any{"ids": ids}
	tx := s.db.Stale(maxStaleness)
	if viewer != nil {
		sql += fmt.Sprintf(`
UNION ALL SELECT CounterKey, %[1]d, %[3]s, '', 0, CAST(NULL AS BYTES) FROM PendingDeltas@{FORCE_INDEX=PendingDeltasByUser} WHERE UserId = @viewer AND CounterKey IN UNNEST(@ids)
%[4]s
UNION ALL SELECT ContentId, %[2]d, %[5]s, Reaction, Version, CAST(NULL AS BYTES) FROM Reactions WHERE UserId = @viewer AND ContentId IN UNNEST(@ids)`,
			srcPending, srcViewer, cols, sharesSQL(srcPending), zeroList)
		params["viewer"] = viewer.UserID
		tx = s.db.Stale(0)
	}
	raw := map[string]counter.Values{}
	viewers := sketches{}
	err := tx.Query(ctx, spanner.Statement{SQL: sql, Params: params}).Do(func(r *spanner.Row) error {
		var key, reaction string
		var src, version int64
		if err := columns(r, &key, &src); err != nil {
			return err
		}
		if src == srcViewer {
			if err := r.Column(reactionColumn, &reaction); err != nil {
				return err
			}
			if err := r.Column(versionColumn, &version); err != nil {
				return err
			}
			out.Reactions[key] = ViewerReaction{Reaction: reaction, Version: version}
			return nil
		}
		v, err := readValues(r, 2)
		if err != nil {
			return err
		}
		raw[key] = raw[key].Plus(v)
		var vb []byte
		if err := r.Column(viewersColumn, &vb); err != nil {
			return err
		}
		return viewers.add(key, vb)
	})
	if err != nil {
		return Counts{}, fmt.Errorf("counterstore.Counts: %w", err)
	}
	viewers.estimate(raw)
	for k, v := range raw {
		out.Values[k] = v.Clamped()
	}
	return out, nil
}

// sharesSQL selects, as rows of source src, the viewer's shares of summed
// outbox rows still pending (see Share): the entries of the viewer's
// reaction rows on @ids whose PendingDeltas row exists.
func sharesSQL(src int) string {
	// An entry written before a field existed lacks it: zero.
	field := func(i int) string {
		return fmt.Sprintf("IFNULL(CAST(SPLIT(e, '%s')[SAFE_OFFSET(%d)] AS INT64), 0)", shareSep, i)
	}
	vals := make([]string, len(valueColumns))
	for i := range vals {
		vals[i] = field(i + 1)
	}
	return fmt.Sprintf(`UNION ALL SELECT r.ContentId, %d, %s, '', 0, CAST(NULL AS BYTES)
FROM Reactions r CROSS JOIN UNNEST(r.PendingShares) AS e
JOIN PendingDeltas p ON p.EventId = SPLIT(e, '%s')[OFFSET(0)] AND p.CounterKey = r.ContentId
WHERE r.UserId = @viewer AND r.ContentId IN UNNEST(@ids)`, src, strings.Join(vals, ", "), shareSep)
}

// sketches merges the unique-viewers sketches of a read's rows, per key.
type sketches map[string]*views.Viewers

// add merges a row's stored sketch (empty: none) into key's.
func (s sketches) add(key string, stored []byte) error {
	if len(stored) == 0 {
		return nil
	}
	if s[key] == nil {
		s[key] = views.NewViewers()
	}
	if err := s[key].MergeBytes(stored); err != nil {
		return fmt.Errorf("viewers of %s: %w", key, err)
	}
	return nil
}

// estimate sets each key's UniqueViewers in vals from its merged sketch.
func (s sketches) estimate(vals map[string]counter.Values) {
	for k, sk := range s {
		v := vals[k]
		v.UniqueViewers = sk.Estimate()
		vals[k] = v
	}
}

// Totals returns the exact count of each id now: snapshot plus shards plus
// every pending change. Tests and the benchmark compare it with the truth.
func (s *Store) Totals(ctx context.Context, ids []string) (counted, pending map[string]counter.Values, err error) {
	err = s.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		var err error
		counted, _, err = countedValues(ctx, tx, ids)
		if err != nil {
			return err
		}
		pending, err = pendingValues(ctx, tx, ids)
		return err
	})
	return counted, pending, err
}

// countedValues sums snapshot and shards per key (unclamped) and returns
// each snapshot's ReconcileTime (no entry: no snapshot). Read by key, the
// snapshots and the shard rows under each key, not by an SQL query: the
// emulator runs every query as a scan of its tables, even one that names a
// single key, so a batch's query would cost the whole table.
func countedValues(ctx context.Context, tx *spanner.ReadOnlyTransaction, ids []string) (map[string]counter.Values, map[string]spanner.NullTime, error) {
	vals, reconciled := map[string]counter.Values{}, map[string]spanner.NullTime{}
	if len(ids) == 0 {
		return vals, reconciled, nil
	}
	cols := append([]string{"CounterKey", "ReconcileTime"}, valueColumns...)
	err := tx.Read(ctx, tableCounters, keySet(ids), cols).Do(func(r *spanner.Row) error {
		var k string
		var t spanner.NullTime
		if err := columns(r, &k, &t); err != nil {
			return err
		}
		v, err := readValues(r, 2)
		vals[k], reconciled[k] = vals[k].Plus(v), t
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read counted values: %w", err)
	}
	cols = append([]string{"CounterKey"}, valueColumns...)
	if err := addValues(tx.Read(ctx, tableShards, prefixSet(ids), cols), vals); err != nil {
		return nil, nil, fmt.Errorf("read counted values: %w", err)
	}
	return vals, reconciled, nil
}

// pendingValues sums every pending change per key, from the outbox's
// index by counter (by key, as countedValues).
func pendingValues(ctx context.Context, tx *spanner.ReadOnlyTransaction, ids []string) (map[string]counter.Values, error) {
	out := map[string]counter.Values{}
	if len(ids) == 0 {
		return out, nil
	}
	cols := append([]string{"CounterKey"}, valueColumns...)
	if err := addValues(tx.ReadUsingIndex(ctx, tablePending, indexPendingByCounter, prefixSet(ids), cols), out); err != nil {
		return nil, fmt.Errorf("read pending values: %w", err)
	}
	return out, nil
}

// addValues adds up, per key, rows that are a CounterKey then the values.
func addValues(it *spanner.RowIterator, vals map[string]counter.Values) error {
	return it.Do(func(r *spanner.Row) error {
		var k string
		if err := columns(r, &k); err != nil {
			return err
		}
		v, err := readValues(r, 1)
		vals[k] = vals[k].Plus(v)
		return err
	})
}

// prefixSet is every row whose key starts with one of ids: a counter's
// shards, its outbox rows in the index by counter.
func prefixSet(ids []string) spanner.KeySet {
	sets := make([]spanner.KeySet, len(ids))
	for i, id := range ids {
		sets[i] = spanner.Key{id}.AsPrefix()
	}
	return spanner.KeySets(sets...)
}

// maxRelay bounds the events one relay pass republishes.
const maxRelay = 5000

// Stale returns the outbox events older than age (their message was lost, or
// is stuck): the rollup republishes them. A republished event that was in
// flight after all is a duplicate the consumer ignores.
func (s *Store) Stale(ctx context.Context, age time.Duration) ([]events.Event, error) {
	stmt := spanner.Statement{
		SQL: `SELECT EventId, CounterKey, UserId, CreateTime, ` + valueList + `
FROM PendingDeltas WHERE CreateTime < @before ORDER BY EventId LIMIT @limit`,
		Params: map[string]any{"before": s.now().Add(-age), "limit": int64(maxRelay * events.MaxDeltas)},
	}
	var out []events.Event
	idx := map[string]int{}
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var id, key string
		var user spanner.NullString
		var at time.Time
		if err := columns(r, &id, &key, &user, &at); err != nil {
			return err
		}
		v, err := readValues(r, 4)
		if err != nil {
			return err
		}
		i, ok := idx[id]
		if !ok {
			if len(out) == maxRelay {
				return nil
			}
			i = len(out)
			idx[id] = i
			out = append(out, events.Event{ID: id, Kind: events.KindCounterDelta, Outbox: true, Time: at})
		}
		out[i].Deltas = append(out[i].Deltas, counter.Deltas(key, v)...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counterstore.Stale: %w", err)
	}
	return out, nil
}

// PendingEvents returns the outbox events of one user on one counter: a
// client retrying a change whose publish failed re-publishes them.
func PendingEvents(ctx context.Context, tx interface {
	Query(context.Context, spanner.Statement) *spanner.RowIterator
}, userID, key string) ([]events.Event, error) {
	stmt := spanner.Statement{
		SQL: `SELECT EventId, CounterKey, ` + valueList + `
FROM PendingDeltas@{FORCE_INDEX=PendingDeltasByUser} WHERE UserId = @user AND CounterKey = @key`,
		Params: map[string]any{"user": userID, "key": key},
	}
	var out []events.Event
	idx := map[string]int{}
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var id, k string
		if err := columns(r, &id, &k); err != nil {
			return err
		}
		v, err := readValues(r, 2)
		if err != nil {
			return err
		}
		i, ok := idx[id]
		if !ok {
			i = len(out)
			idx[id] = i
			out = append(out, events.Event{ID: id, Kind: events.KindCounterDelta, Outbox: true})
		}
		out[i].Deltas = append(out[i].Deltas, counter.Deltas(k, v)...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counterstore.PendingEvents: %w", err)
	}
	return out, nil
}

// Pending returns the outbox mutations that record the deltas of event ev,
// authored by userID ("" for none), in the transaction that makes the change.
func Pending(ev events.Event, userID string) []*spanner.Mutation {
	var ms []*spanner.Mutation
	var user spanner.NullString
	if userID != "" {
		user = spanner.NullString{StringVal: userID, Valid: true}
	}
	for key, v := range counter.Coalesce(ev.Deltas) {
		ms = append(ms, pendingRow(ev.ID, key, user, v))
	}
	return ms
}

// pendingRow inserts one outbox row. Only the fields it moves are written:
// an outbox row is inserted once, and the others default to 0 (fewer values
// for the client to encode on the hot path).
func pendingRow(id, key string, user spanner.NullString, v counter.Values) *spanner.Mutation {
	cols, vals := []string{"EventId", "CounterKey", "UserId", "CreateTime"}, []any{id, key, user, spanner.CommitTimestamp}
	for i, n := range v.Slice() {
		if n != 0 {
			cols, vals = append(cols, valueColumns[i]), append(vals, n)
		}
	}
	return spanner.Insert(tablePending, cols, vals)
}
