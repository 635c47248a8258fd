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
	store   *Store
	pub     events.Publisher
	batcher *counter.Batcher[SetRequest, SetResult]
}

// WriterOptions tune a Writer.
type WriterOptions struct {
	// Batched turns group commit on.
	Batched bool
	// MaxBatch bounds the requests of one transaction (and events of one
	// message); MaxInFlight the transactions at once (1 against the emulator).
	MaxBatch    int
	MaxInFlight int
	// Linger is how long a batch waits for company; zero runs at once.
	Linger time.Duration
}

// NewWriter returns a Writer over store publishing through pub.
func NewWriter(store *Store, pub events.Publisher, o WriterOptions) *Writer {
	w := &Writer{store: store, pub: pub}
	if o.Batched {
		if o.MaxBatch <= 0 {
			o.MaxBatch = 200
		}
		w.batcher = counter.NewBatcher(counter.BatcherOptions{
			MaxItems: o.MaxBatch, MaxInFlight: o.MaxInFlight, Linger: o.Linger, Timeout: 20 * time.Second,
		}, w.run)
	}
	return w
}

// Set records one change and returns once its event is published. A
// publish failure is ErrPublish (wrapping the cause): the change is recorded
// and its deltas are pending, and the client's retry re-publishes them.
func (w *Writer) Set(ctx context.Context, r SetRequest) (SetResult, error) {
	if w.batcher != nil {
		return w.batcher.Do(ctx, r)
	}
	res, err := w.run(ctx, []SetRequest{r})
	if err != nil {
		return SetResult{}, err
	}
	return res[0], nil
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
