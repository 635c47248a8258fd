// Package countstore reads the counters from Spanner: the public counts
// (snapshot plus live shards, no counting on read), a signed-in caller's
// own view of them (their reactions and their changes still pending in the
// outbox, each counted once), and the exact totals tests and benchmarks
// compare with the truth.
package countstore

import (
	"time"

	"github.com/videngage/engagement/shared/cache"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Store is the counts reads' Spanner store.
type Store struct {
	db *spannerdb.DB
	// gone holds summed outbox rows a signed-in read found gone (counted),
	// with the timestamp it read at (sharesToRead).
	gone *cache.Map[outboxstore.RowKey, time.Time]
}

// New returns the store over db.
func New(db *spannerdb.DB) *Store {
	return &Store{db: db, gone: cache.New[outboxstore.RowKey, time.Time](countedShares, nil)}
}
