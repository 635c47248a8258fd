// Package outboxstore keeps the counters' outbox in Spanner and counts it:
// the PendingDeltas rows a change writes in its own transaction (Pending,
// the batches and the summed rows with their authors' shares), the consumer
// that adds events to the counters' shards and deletes their outbox rows in
// one transaction (Apply), and the relay's listing of rows whose message
// was lost (Stale).
package outboxstore

import (
	"time"

	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Store is the outbox's and the consumer's Spanner store.
type Store struct {
	db  *spannerdb.DB
	now func() time.Time
}

// New returns the store over db.
func New(db *spannerdb.DB) *Store {
	return &Store{db: db, now: time.Now}
}

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
