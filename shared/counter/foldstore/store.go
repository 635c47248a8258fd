// Package foldstore folds the counters' shards into their snapshots in
// Spanner, a partition of the moved counters at a time, and sets each
// counter's shard count from the write rate its shards measured.
package foldstore

import (
	"time"

	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/spannerdb"
)

// revisitShard marks a MovedCounters row asking the rollup to come back to a
// counter whose shard count is still above the minimum.
const revisitShard = -1

// reconciled are the fields some source of truth owns: folding a change of
// one of them sets the counter's TruthHour (views do not).
var reconciled = []counter.Field{counter.Likes, counter.Dislikes, counter.Comments, counter.Replies, counter.Threads}

// movesTruth says whether folding v changes a reconciled field.
func movesTruth(v counter.Values) bool { return !v.Only(reconciled).IsZero() }

// Store is the fold's Spanner store.
type Store struct {
	db     *spannerdb.DB
	policy counter.ShardPolicy
	// window is the rollup interval: the longest a shard holds writes
	// before a fold, so the span over which Writes were measured.
	window time.Duration
	now    func() time.Time
}

// Options tune a Store.
type Options struct {
	Policy         counter.ShardPolicy
	RollupInterval time.Duration
	// Now is the clock of the fold times and truth hours it writes
	// (default time.Now).
	Now func() time.Time
}

// FromConfig returns the store the rollup folds with: the shard policy and
// the rollup interval from the configuration.
func FromConfig(db *spannerdb.DB, c config.Counters) *Store {
	return New(db, Options{
		Policy:         counter.NewShardPolicy(c.ShardWritesPerSecond),
		RollupInterval: c.RollupInterval,
	})
}

// New returns the store over db. A zero (or, for the policy, not positive)
// Policy and RollupInterval are the configuration's defaults.
func New(db *spannerdb.DB, o Options) *Store {
	d := config.Defaults().Counters
	if !(o.Policy.WritesPerShard > 0) {
		o.Policy = counter.NewShardPolicy(d.ShardWritesPerSecond)
	}
	if o.RollupInterval <= 0 {
		o.RollupInterval = d.RollupInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{db: db, policy: o.Policy, window: o.RollupInterval, now: o.Now}
}
