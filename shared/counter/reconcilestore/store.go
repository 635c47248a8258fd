// Package reconcilestore reconciles the counters with their sources of
// truth in Spanner: runs of every counter (daily) or of the counters whose
// truth moved (hourly), cut into slices with stored cursors that any
// invocation may work under the slice's lease, each batch's corrections
// written where truth − counted − pending is not zero.
package reconcilestore

import (
	"time"

	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Store is reconciliation's Spanner store.
type Store struct {
	db            *spannerdb.DB
	leases        *leasestore.Store
	reconcilePage int
	sliceLease    time.Duration
	now           func() time.Time
}

// Options tune a Store.
type Options struct {
	// ReconcilePage is how many keys a reconciliation of every counter lists
	// from each of the counters and the sources at a time (default 10,000).
	ReconcilePage int
	// SliceLease is how long a reconciliation worker holds a slice past its
	// last batch (default 2 minutes): how long a killed worker's slice
	// waits before another worker resumes it.
	SliceLease time.Duration
	// Now is the clock the runs' hours and the slices' leases are read on
	// (default time.Now).
	Now func() time.Time
}

// New returns the store over db.
func New(db *spannerdb.DB, o Options) *Store {
	if o.ReconcilePage <= 0 {
		o.ReconcilePage = defaultReconcilePage
	}
	if o.SliceLease <= 0 {
		o.SliceLease = defaultSliceLease
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{db: db, leases: leasestore.New(db, o.Now), reconcilePage: o.ReconcilePage, sliceLease: o.SliceLease, now: o.Now}
}
