package reactionstore

import (
	"context"
	"fmt"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// Writer records reactions and publishes their events. Batched (the default),
// the changes that arrive while a transaction runs are recorded together in
// the next one (group commit) and their events published as one message: on
// a hot item, one commit and one message carry dozens of reactions. Unbatched
// (the benchmark's naive baseline) each change is its own transaction and its
// own message.
type Writer struct {
	store  *Store
	pub    events.Publisher
	opts   WriterOptions
	sets   *counter.GroupCommit[SetRequest, SetResult]
	limits *counter.GroupCommit[string, time.Duration] // nil: no limiter
}

// Limiter admits requests of users, one each, or says how long each must
// wait (zero: admitted); *ratelimit.Bigtable is one.
type Limiter interface {
	AllowMany(ctx context.Context, userIDs []string) (retryAfter []time.Duration, err error)
}

// LimitWith checks every request against l before its transaction (instead
// of, or besides, the store's own limit) and returns w. Batched, the
// requests that arrive while a check runs are checked together by the next
// one, as transactions group: on a hot item, two limiter calls serve dozens
// of requests.
func (w *Writer) LimitWith(l Limiter) *Writer {
	w.limits = nil
	if l != nil {
		w.limits = counter.NewGroupCommit(w.opts, l.AllowMany)
	}
	return w
}

// WriterOptions tune a Writer: Batched turns group commit on.
type WriterOptions = counter.GroupCommitOptions

// NewWriter returns a Writer over store publishing through pub.
func NewWriter(store *Store, pub events.Publisher, o WriterOptions) *Writer {
	w := &Writer{store: store, pub: pub, opts: o}
	w.sets = counter.NewGroupCommit(o, w.run)
	return w
}

// Set records one change and returns once its event is published. A
// publish failure is ErrPublish (wrapping the cause): the change is recorded
// and its deltas are pending, and the client's retry re-publishes them.
func (w *Writer) Set(ctx context.Context, r SetRequest) (SetResult, error) {
	if w.limits != nil {
		wait, err := w.limits.Do(ctx, r.UserID)
		if err != nil {
			return SetResult{}, fmt.Errorf("reactionstore: rate limit: %w", err)
		}
		if wait > 0 {
			return SetResult{Err: &RateLimitedError{RetryAfter: wait}}, nil
		}
	}
	return w.sets.Do(ctx, r)
}

func (w *Writer) run(ctx context.Context, reqs []SetRequest) ([]SetResult, error) {
	res, err := w.store.SetMany(ctx, reqs)
	if err != nil {
		return nil, err
	}
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
	if err := events.PublishAll(ctx, w.pub, evs); err != nil {
		perr := fmt.Errorf("%w: %w", ErrPublish, err)
		for i := range res {
			if res[i].Err == nil && (res[i].Event != nil || len(res[i].Republish) > 0) {
				res[i].Err = perr
			}
		}
	}
	return res, nil
}
