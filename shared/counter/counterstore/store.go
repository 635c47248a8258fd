// Package counterstore keeps the sharded counters in Spanner: the consumer
// that applies counter events idempotently, the rollup that folds shards into
// snapshots and sets shard counts, the read paths, the outbox relay
// and reconciliation against the sources of truth.
package counterstore

import (
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/cache"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/spannerdb"
)

// WriterOptions are the group-commit options of a writer recording counted
// changes in db: the requests that arrive while a transaction runs form the
// next one, inFlight transactions at once, or one when db is serial (the
// emulator runs one read-write transaction at a time).
func WriterOptions(db *spannerdb.DB, inFlight int) batch.GroupCommitOptions {
	if db.Serial() {
		inFlight = 1
	}
	return batch.GroupCommitOptions{Batched: true, MaxInFlight: inFlight}
}

// Table and column names (shared/topology/ddl/010_counters.sql).
const (
	tableCounters      = "Counters"
	tableShards        = "CounterShards"
	tableMoved         = "MovedCounters"
	tablePending       = "PendingDeltas"
	tableReactions     = "Reactions"
	indexPendingByUser = "PendingDeltasByUser"
	// indexPendingByCounter holds the outbox rows by counter.
	indexPendingByCounter = "PendingDeltasByCounter"
	// indexMovedByPart holds the moved markers by hash partition.
	indexMovedByPart = "MovedCountersByPart"
	tableApplied     = "AppliedEvents"
	// colViewers is the unique-viewers sketch of a snapshot or shard row
	// (NULL: none).
	colViewers = "Viewers"
)

// revisitShard marks a MovedCounters row asking the rollup to come back to a
// counter whose shard count is still above the minimum.
const revisitShard = -1

// Store is the counters' Spanner store.
type Store struct {
	db     *spannerdb.DB
	policy counter.ShardPolicy
	// window is the rollup interval: the longest a shard holds writes
	// before a fold, so the span over which Writes were measured.
	window        time.Duration
	reconcilePage int
	sliceLease    time.Duration
	now           func() time.Time
	// heavy holds the viewers whose reactions a signed-in read looks up by
	// key: those found to hold reactionRangeRows or more.
	heavy *cache.Map[string, struct{}]
	// gone holds summed outbox rows a signed-in read found gone (counted),
	// with the timestamp it read at (sharesToRead).
	gone *cache.Map[RowKey, time.Time]
}

// Options tune a Store.
type Options struct {
	Policy         counter.ShardPolicy
	RollupInterval time.Duration
	// ReconcilePage is how many keys a reconciliation of every counter lists
	// from each of the counters and the sources at a time (default 10,000).
	ReconcilePage int
	// SliceLease is how long a reconciliation worker holds a slice past its
	// last batch (default 2 minutes): how long a killed worker's slice
	// waits before another worker resumes it.
	SliceLease time.Duration
}

// Consumer returns the store the counting consumers apply events with
// (ApplyCounters, the rollup's views fold): the shard policy and the rollup
// interval from the configuration.
func Consumer(db *spannerdb.DB, c config.Counters) *Store {
	return New(db, Options{
		Policy:         counter.ShardPolicy{WritesPerShard: c.ShardWritesPerSecond, MinWindow: counter.DefaultShardPolicy.MinWindow},
		RollupInterval: c.RollupInterval,
	})
}

// New returns the store over db.
func New(db *spannerdb.DB, o Options) *Store {
	if o.Policy.WritesPerShard <= 0 {
		o.Policy = counter.DefaultShardPolicy
	}
	if o.RollupInterval <= 0 {
		o.RollupInterval = 5 * time.Second
	}
	if o.ReconcilePage <= 0 {
		o.ReconcilePage = defaultReconcilePage
	}
	if o.SliceLease <= 0 {
		o.SliceLease = defaultSliceLease
	}
	return &Store{db: db, policy: o.Policy, window: o.RollupInterval, reconcilePage: o.ReconcilePage, sliceLease: o.SliceLease, now: time.Now, heavy: cache.New[string, struct{}](heavyViewers, nil), gone: cache.New[RowKey, time.Time](countedShares, nil)}
}

// valueColumns are the counted columns in the order of counter.Fields.
var valueColumns = counter.Columns

// valueList selects valueColumns in a query, and zeroList a zero for each.
var (
	valueList = strings.Join(valueColumns, ", ")
	zeroList  = strings.TrimSuffix(strings.Repeat("0, ", len(valueColumns)), ", ")
)

// The columns of a row of a counts query (key, source, the values, then
// these): the viewer's reaction and its version, and the unique-viewers
// sketch.
var (
	reactionColumn = 2 + len(valueColumns)
	versionColumn  = reactionColumn + 1
	viewersColumn  = versionColumn + 1
)

func readValues(r *spanner.Row, first int) (counter.Values, error) {
	vals := make([]int64, len(valueColumns))
	ptrs := make([]any, len(valueColumns))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for i, p := range ptrs {
		if err := r.Column(first+i, p); err != nil {
			return counter.Values{}, err
		}
	}
	return counter.FromSlice(vals), nil
}

func withValues(cols []string, vals []any, v counter.Values) ([]string, []any) {
	cols = append(cols, valueColumns...)
	for _, n := range v.Slice() {
		vals = append(vals, n)
	}
	return cols, vals
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func chunks(keys []string, n int) [][]string {
	var out [][]string
	for len(keys) > 0 {
		k := min(n, len(keys))
		out = append(out, keys[:k])
		keys = keys[k:]
	}
	return out
}

// columns reads the first len(ptrs) columns of r (Row.Columns wants all).
func columns(r *spanner.Row, ptrs ...any) error {
	for i, p := range ptrs {
		if err := r.Column(i, p); err != nil {
			return err
		}
	}
	return nil
}

// Columns is columns for the stores of other packages.
func Columns(r *spanner.Row, ptrs ...any) error { return columns(r, ptrs...) }
