// Package counterdb is the counters' Spanner schema as the counter stores
// share it: table and column names, the counted values' columns, key sets,
// and the reads of counted and pending values that the counts reads and
// reconciliation both make.
package counterdb

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
)

// Table and column names (shared/topology/ddl/010_counters.sql).
const (
	Counters      = "Counters"
	Shards        = "CounterShards"
	Moved         = "MovedCounters"
	Pending       = "PendingDeltas"
	Reactions     = "Reactions"
	PendingByUser = "PendingDeltasByUser"
	// PendingByCounter holds the outbox rows by counter.
	PendingByCounter = "PendingDeltasByCounter"
	// MovedByPart holds the moved markers by hash partition.
	MovedByPart = "MovedCountersByPart"
	Applied     = "AppliedEvents"
	// Viewers is the unique-viewers sketch of a snapshot or shard row
	// (NULL: none).
	Viewers = "Viewers"
)

// ValueColumns are the counted columns in the order of counter.Fields.
var ValueColumns = counter.Columns

// ValueList selects ValueColumns in a query, and ZeroList a zero for each.
var (
	ValueList = strings.Join(ValueColumns, ", ")
	ZeroList  = strings.TrimSuffix(strings.Repeat("0, ", len(ValueColumns)), ", ")
)

// ReadValues reads the counted values from column first of r on.
func ReadValues(r *spanner.Row, first int) (counter.Values, error) {
	vals := make([]int64, len(ValueColumns))
	for i := range vals {
		if err := r.Column(first+i, &vals[i]); err != nil {
			return counter.Values{}, err
		}
	}
	return counter.FromSlice(vals), nil
}

// WithValues appends the counted columns and v's values to cols and vals.
func WithValues(cols []string, vals []any, v counter.Values) ([]string, []any) {
	cols = append(cols, ValueColumns...)
	for _, n := range v.Slice() {
		vals = append(vals, n)
	}
	return cols, vals
}

// SortedKeys are the keys of m in order.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Chunks cuts keys into slices of at most n.
func Chunks(keys []string, n int) [][]string {
	var out [][]string
	for len(keys) > 0 {
		k := min(n, len(keys))
		out = append(out, keys[:k])
		keys = keys[k:]
	}
	return out
}

// Columns reads the first len(ptrs) columns of r (Row.Columns wants all).
func Columns(r *spanner.Row, ptrs ...any) error {
	for i, p := range ptrs {
		if err := r.Column(i, p); err != nil {
			return err
		}
	}
	return nil
}

// KeySet is the set of ids' primary keys in a table keyed by CounterKey.
func KeySet(ids []string) spanner.KeySet {
	ks := make([]spanner.Key, len(ids))
	for i, id := range ids {
		ks[i] = spanner.Key{id}
	}
	return spanner.KeySetFromKeys(ks...)
}

// PrefixSet is every row whose key starts with one of ids: a counter's
// shards, its outbox rows in the index by counter.
func PrefixSet(ids []string) spanner.KeySet {
	sets := make([]spanner.KeySet, len(ids))
	for i, id := range ids {
		sets[i] = spanner.Key{id}.AsPrefix()
	}
	return spanner.KeySets(sets...)
}

// TruthHour is the hour of t, as a snapshot's TruthHour stores it: the hour
// a fold (or a flag change) last moved a field some source of truth owns,
// which the hourly reconciliation lists.
func TruthHour(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// Counted sums snapshot and shards per key (unclamped) and returns each
// snapshot's ReconcileTime (no entry: no snapshot). Read by key, the
// snapshots and the shard rows under each key, not by an SQL query: the
// emulator runs every query as a scan of its tables, even one that names a
// single key, so a batch's query would cost the whole table.
func Counted(ctx context.Context, tx *spanner.ReadOnlyTransaction, ids []string) (map[string]counter.Values, map[string]spanner.NullTime, error) {
	vals, reconciled := map[string]counter.Values{}, map[string]spanner.NullTime{}
	if len(ids) == 0 {
		return vals, reconciled, nil
	}
	cols := append([]string{"CounterKey", "ReconcileTime"}, ValueColumns...)
	err := tx.Read(ctx, Counters, KeySet(ids), cols).Do(func(r *spanner.Row) error {
		var k string
		var t spanner.NullTime
		if err := Columns(r, &k, &t); err != nil {
			return err
		}
		v, err := ReadValues(r, 2)
		vals[k], reconciled[k] = vals[k].Plus(v), t
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read counted values: %w", err)
	}
	cols = append([]string{"CounterKey"}, ValueColumns...)
	if err := AddValues(tx.Read(ctx, Shards, PrefixSet(ids), cols), vals); err != nil {
		return nil, nil, fmt.Errorf("read counted values: %w", err)
	}
	return vals, reconciled, nil
}

// PendingSums sums every pending change per key, from the outbox's index by
// counter (by key, as Counted).
func PendingSums(ctx context.Context, tx *spanner.ReadOnlyTransaction, ids []string) (map[string]counter.Values, error) {
	out := map[string]counter.Values{}
	if len(ids) == 0 {
		return out, nil
	}
	cols := append([]string{"CounterKey"}, ValueColumns...)
	if err := AddValues(tx.ReadUsingIndex(ctx, Pending, PendingByCounter, PrefixSet(ids), cols), out); err != nil {
		return nil, fmt.Errorf("read pending values: %w", err)
	}
	return out, nil
}

// AddValues adds up, per key, rows that are a CounterKey then the values.
func AddValues(it *spanner.RowIterator, vals map[string]counter.Values) error {
	return it.Do(func(r *spanner.Row) error {
		var k string
		if err := Columns(r, &k); err != nil {
			return err
		}
		v, err := ReadValues(r, 1)
		vals[k] = vals[k].Plus(v)
		return err
	})
}
