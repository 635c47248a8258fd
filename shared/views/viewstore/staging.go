// Package viewstore is the storage of views on their way to the counters:
// ApplyViews claims each view for exactly one batch of watches
// (shared/views/claimstore) and leaves each batch's counter events in a
// Bigtable row of their own (Staging); the
// rollup's views fold counts many batches in one Spanner transaction and
// then deletes their rows (shared/views.Fold).
package viewstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/views"
)

// Table and column names, as in shared/topology/topology.json.
const (
	StagingTable  = "view_batches"
	stagingFamily = "v"
	colEvents     = "e"
)

// Staging is the staged batches' table. A batch is one row, keyed by its
// part (a hash of the batch id into counter.Parts, three hex digits: a
// rollup partition folds the staged views of the parts whose counters it
// folds) and its id: every delivery of a batch writes the same row, and one
// row's mutation is atomic, so a fold reads a batch whole or not at all. No
// row is written twice by different batches, so no row is hot, whatever the
// video.
//
// Its client is the transactional one (host.Clients.BigtableTx, one
// cluster), as the claims': a fold reads on the cluster that ApplyViews
// wrote to.
type Staging struct {
	t *bigtable.Table
}

// NewStaging uses the staging table of client c.
func NewStaging(c *bigtable.Client) *Staging { return &Staging{t: c.Open(StagingTable)} }

// part is the hash partition of a batch id.
func part(batchID string) int {
	h := fnv.New32a()
	h.Write([]byte(batchID))
	return int(h.Sum32() % counter.Parts)
}

// RowKey is the row of a batch.
func RowKey(batchID string) string { return fmt.Sprintf("%03x#%s", part(batchID), batchID) }

// Put stages the counter events of the watches batchID owns, in one row
// mutation. Putting the same batch again writes the same column (the
// row's only one, read at its latest version), so a redelivery changes
// nothing; a put after the batch was folded and its row deleted is
// refused by the fold (the events' ids are in AppliedEvents).
func (s *Staging) Put(ctx context.Context, batchID string, evs []events.Event) error {
	data, err := events.Encode(events.Message{Events: evs})
	if err != nil {
		return fmt.Errorf("viewstore.Put: %w", err)
	}
	m := bigtable.NewMutation()
	// The write time, so that the family's GC (far longer than any fold
	// lag) counts from it, and a fold sees the batch's age.
	m.Set(stagingFamily, colEvents, bigtable.Time(time.Now()).TruncateToMilliseconds(), data)
	if err := s.t.Apply(ctx, RowKey(batchID), m); err != nil {
		return errs.Backend("stage views", err)
	}
	return nil
}

// List returns up to limit staged batches of parts [lo, hi), in row order.
// A row whose value cannot be decoded (never written by Put) is returned
// with Err set, so that the fold reports it and leaves it.
func (s *Staging) List(ctx context.Context, lo, hi, limit int) ([]views.Batch, error) {
	return s.list(ctx, lo, hi, limit, nil)
}

// StagedBefore returns up to limit batches of parts [lo, hi) staged before
// t and still waiting: each fold counts and deletes what it lists, so they
// are batches the folds do not count (see rollupfn's stalled check).
func (s *Staging) StagedBefore(ctx context.Context, lo, hi int, t time.Time, limit int) ([]views.Batch, error) {
	return s.list(ctx, lo, hi, limit, bigtable.TimestampRangeFilterMicros(0, bigtable.Time(t).TruncateToMilliseconds()))
}

// list returns up to limit batches of parts [lo, hi) whose latest cell
// passes also (nil: every batch).
func (s *Staging) list(ctx context.Context, lo, hi, limit int, also bigtable.Filter) ([]views.Batch, error) {
	if lo < 0 || hi > counter.Parts || lo >= hi {
		return nil, fmt.Errorf("viewstore.List: parts [%d, %d) outside [0, %d)", lo, hi, counter.Parts)
	}
	rr := bigtable.InfiniteRange(fmt.Sprintf("%03x#", lo))
	if hi < counter.Parts {
		rr = bigtable.NewRange(fmt.Sprintf("%03x#", lo), fmt.Sprintf("%03x#", hi))
	}
	filter := bigtable.ChainFilters(bigtable.FamilyFilter("^"+stagingFamily+"$"), bigtable.LatestNFilter(1))
	if also != nil {
		filter = bigtable.ChainFilters(filter, also)
	}
	var out []views.Batch
	err := s.t.ReadRows(ctx, rr, func(r bigtable.Row) bool {
		for _, item := range r[stagingFamily] {
			b := views.Batch{Key: r.Key(), Written: item.Timestamp.Time()}
			m, err := events.Decode(item.Value)
			if err != nil {
				b.Err = err
			} else {
				b.Events = m.Events
			}
			out = append(out, b)
		}
		return true
	}, bigtable.RowFilter(filter), bigtable.LimitRows(int64(limit)))
	if err != nil {
		return nil, errs.Backend("list staged views", err)
	}
	return out, nil
}

// Delete removes the rows of batches, in one MutateRows.
func (s *Staging) Delete(ctx context.Context, batches []views.Batch) error {
	if len(batches) == 0 {
		return nil
	}
	keys := make([]string, len(batches))
	muts := make([]*bigtable.Mutation, len(batches))
	for i, b := range batches {
		keys[i] = b.Key
		muts[i] = bigtable.NewMutation()
		muts[i].DeleteRow()
	}
	rowErrs, err := s.t.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return errs.Backend("delete staged views", err)
	}
	for _, e := range rowErrs {
		if e != nil {
			return errs.Backend("delete staged views", e)
		}
	}
	return nil
}
