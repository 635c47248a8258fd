// Package countertest builds the counter stores over one database, for the
// tests of each store that need the others to write and read counters.
package countertest

import (
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Stores are the counter stores over DB.
type Stores struct {
	DB     *spannerdb.DB
	Outbox *outboxstore.Store
	Counts *countstore.Store
	Folds  *foldstore.Store
	Recon  *reconcilestore.Store
	Leases *leasestore.Store
}

// New returns the stores over db; o tunes reconciliation, and its clock
// (o.Now) is the fold's and the leases' too.
func New(db *spannerdb.DB, o reconcilestore.Options) *Stores {
	return &Stores{
		DB:     db,
		Outbox: outboxstore.New(db),
		Counts: countstore.New(db),
		Folds:  foldstore.New(db, foldstore.Options{Now: o.Now}),
		Recon:  reconcilestore.New(db, o),
		Leases: leasestore.New(db, o.Now),
	}
}

// ViewsEvent is a batch's view event: n views of key by the given users.
func ViewsEvent(id, key string, n int64, users ...string) events.Event {
	e := events.Event{ID: id, Kind: events.KindCounterDelta,
		Deltas: []counter.Delta{{Key: key, Field: counter.Views, N: n}}, Viewers: map[string][]uint64{}}
	for _, u := range users {
		e.Viewers[key] = append(e.Viewers[key], history.NewViewerHasher("test").Hash(u))
	}
	return e
}
