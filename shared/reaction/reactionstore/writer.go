package reactionstore

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/telemetry"
)

// Writer records reactions and publishes their events. Batched (the default),
// the changes that arrive while a transaction runs are recorded together in
// the next one (group commit) and their events published as one message: on
// a hot item, one commit and one message carry dozens of reactions. Unbatched
// (the benchmark's naive baseline) each change is its own transaction and its
// own message.
type Writer struct {
	store   *Store
	pub     events.Publisher
	sets    *batch.GroupCommit[SetRequest, SetResult]
	limiter Limiter // nil: no limit besides the store's
	// groups counts the transactions run (telemetry.MetricReactionGroups).
	groups metric.Int64Counter
}

// Limiter admits requests of users, one each, or says how long each must
// wait (zero: admitted); *ratelimit.Bigtable is one.
type Limiter interface {
	AllowMany(ctx context.Context, userIDs []string) (retryAfter []time.Duration, err error)
}

// LimitWith checks every request against l (instead of, or besides, the
// store's own limit) and returns w. The requests of one transaction are
// checked together, in one call of l made before the transaction, so that
// on a hot item one check serves as many requests as one commit does; the
// refused ones never join the transaction.
func (w *Writer) LimitWith(l Limiter) *Writer {
	w.limiter = l
	return w
}

// WriterOptions tune a Writer: Batched turns group commit on.
type WriterOptions = batch.GroupCommitOptions

// NewWriter returns a Writer over store publishing through pub.
func NewWriter(store *Store, pub events.Publisher, o WriterOptions) *Writer {
	w := &Writer{store: store, pub: pub,
		groups: telemetry.NewCounter(nil, telemetry.MetricReactionGroups, "{transaction}",
			"Transactions of the reactions' group commit, each recording the requests that waited for it; reactions ÷ transactions is the group size."),
	}
	w.sets = batch.NewGroupCommit(o, w.run)
	return w
}

// Set records one change and returns once its event is published, or once
// publishing failed: the change is recorded either way, its deltas pending
// until the relay republishes them (events.PublishCommitted). A client's
// retry of a request that changes nothing republishes the user's pending
// events on the item at once (SetResult.Republish).
func (w *Writer) Set(ctx context.Context, r SetRequest) (SetResult, error) {
	return w.sets.Do(ctx, r)
}

// run records one group of requests: the limiter's check of them all, then
// the transaction of those admitted, then their message.
func (w *Writer) run(ctx context.Context, reqs []SetRequest) ([]SetResult, error) {
	if w.limiter == nil {
		return w.record(ctx, reqs)
	}
	users := make([]string, len(reqs))
	for i, r := range reqs {
		users[i] = r.UserID
	}
	waits, err := w.limiter.AllowMany(ctx, users)
	if err != nil {
		return nil, fmt.Errorf("reactionstore: rate limit: %w", err)
	}
	results := make([]SetResult, len(reqs))
	admitted := make([]SetRequest, 0, len(reqs))
	for i, r := range reqs {
		if waits[i] > 0 {
			results[i].Err = &errs.RateLimitedError{What: "reactions", RetryAfter: waits[i]}
			continue
		}
		admitted = append(admitted, r)
	}
	if len(admitted) == 0 {
		return results, nil
	}
	res, err := w.record(ctx, admitted)
	if err != nil {
		return nil, err
	}
	j := 0
	for i := range results {
		if results[i].Err == nil {
			results[i] = res[j]
			j++
		}
	}
	return results, nil
}

// record runs the transaction of reqs and publishes their events.
func (w *Writer) record(ctx context.Context, reqs []SetRequest) ([]SetResult, error) {
	res, err := w.store.SetMany(ctx, reqs)
	if err != nil {
		return nil, err
	}
	w.groups.Add(ctx, 1)
	evs := Events(res)
	events.PublishCommitted(ctx, w.pub, evs)
	return res, nil
}

// Events returns the events to publish of a SetMany: each result's change
// and republished events, once each (the changes of one item in one
// transaction share their summed event).
func Events(res []SetResult) []events.Event {
	var evs []events.Event
	seen := map[string]bool{}
	for _, r := range res {
		if r.Event != nil && !seen[r.Event.ID] {
			seen[r.Event.ID] = true
			evs = append(evs, *r.Event)
		}
		for _, e := range r.Republish {
			if !seen[e.ID] {
				seen[e.ID] = true
				evs = append(evs, e)
			}
		}
	}
	return evs
}
