// Package views is the pure logic of views and unique viewers: the sketch
// of a video's distinct viewers (Viewers), and the fold that counts the
// staged batches of watches (viewstore) into the counters in one Spanner
// transaction for many batches and videos, then deletes them.
package views

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// Batch is one staged batch: the counter events of the watches it owns.
type Batch struct {
	Key     string // its row
	Written time.Time
	Events  []events.Event
	// Err says the row could not be decoded; the fold leaves it.
	Err error
}

// Staging lists and deletes staged batches.
type Staging interface {
	List(ctx context.Context, lo, hi, limit int) ([]Batch, error)
	Delete(ctx context.Context, batches []Batch) error
}

// Counters counts events idempotently (outboxstore.Store).
type Counters interface {
	Apply(ctx context.Context, evs []events.Event) (counter.ApplyStats, error)
}

// Limits of one fold.
const (
	// maxPerPass bounds the batches one pass reads; what is left waits for
	// the next pass, a second later.
	maxPerPass = 10000
	// maxDeltasPerCommit bounds one transaction's counter deltas (its
	// AppliedEvents rows are fewer): well under Spanner's 80,000 mutations
	// a commit even when every delta is a counter of its own.
	maxDeltasPerCommit = 2000
)

// FoldOptions select the staged batches of parts [Lo, Hi) (counter.Parts).
type FoldOptions struct {
	Lo, Hi int
}

// FoldStats says what one fold pass did.
type FoldStats struct {
	Batches     int // staged batches read
	Applied     int // events counted now
	Duplicates  int // events counted before (a redelivery staged after its fold, or a fold that died before its deletion)
	Commits     int
	Undecodable int
	// Oldest is when the oldest batch read was staged (zero: none).
	Oldest time.Time
}

// Fold counts the staged batches of o's parts and deletes them: per group
// of batches (up to maxDeltasPerCommit deltas), one Counters.Apply — one
// Spanner transaction that counts the events not yet in AppliedEvents and
// records them there — then one deletion of the group's rows. A fold that
// dies between the two leaves rows whose events are all applied: the next
// fold finds them duplicates and only deletes them. A batch staged again
// after its deletion (Pub/Sub's redelivery, within the 7 days that
// AppliedEvents keeps its ids) is refused the same way.
func Fold(ctx context.Context, s Staging, c Counters, o FoldOptions) (FoldStats, error) {
	var st FoldStats
	bs, err := s.List(ctx, o.Lo, o.Hi, maxPerPass)
	if err != nil {
		return st, fmt.Errorf("views.Fold: %w", err)
	}
	st.Batches = len(bs)
	var group []Batch
	var evs []events.Event
	deltas := 0
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		as, err := c.Apply(ctx, evs)
		if err != nil {
			return fmt.Errorf("views.Fold: count %d batches: %w", len(group), err)
		}
		st.Applied += as.Applied
		st.Duplicates += as.Duplicates
		st.Commits += as.Commits
		if err := s.Delete(ctx, group); err != nil {
			return fmt.Errorf("views.Fold: delete %d counted batches: %w", len(group), err)
		}
		group, evs, deltas = group[:0], evs[:0], 0
		return nil
	}
	for _, b := range bs {
		if b.Err != nil {
			st.Undecodable++
			slog.ErrorContext(ctx, "views: a staged batch cannot be decoded; left in place", "row", b.Key, "error", b.Err.Error())
			continue
		}
		if st.Oldest.IsZero() || b.Written.Before(st.Oldest) {
			st.Oldest = b.Written
		}
		n := 0
		for _, e := range b.Events {
			n += len(e.Deltas)
		}
		if deltas+n > maxDeltasPerCommit || len(evs)+len(b.Events) > events.MaxEvents {
			if err := flush(); err != nil {
				return st, err
			}
		}
		group = append(group, b)
		evs = append(evs, b.Events...)
		deltas += n
	}
	return st, flush()
}
