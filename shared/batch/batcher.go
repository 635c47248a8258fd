// Package batch groups concurrent calls into batches run together (group
// commit): a store writer's one transaction and one message for many
// requests, and the counts' one read for many viewers. No I/O here.
package batch

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Batcher groups concurrent calls into batches handled by one call of run
// (group commit): while a batch runs, the calls that arrive queue up and form
// the next batch, so the batch size follows the load with no added latency
// when idle. Many reactions on one hot item then cost one transaction and one
// Pub/Sub message per batch instead of one each.
type Batcher[T, R any] struct {
	run         func(ctx context.Context, items []T) ([]R, error)
	maxItems    int
	maxInFlight int
	linger      time.Duration
	gather      time.Duration
	maxGather   time.Duration
	timeout     time.Duration
	// sameBatch reports whether two items may share a batch (NewBatcherBy);
	// nil: any two may.
	sameBatch func(a, b T) bool

	mu       sync.Mutex
	queue    []*call[T, R]
	inFlight int
}

type call[T, R any] struct {
	item     T
	deadline time.Time // of the caller's context; zero: none
	res      R
	err      error
	done     chan struct{}
}

// BatcherOptions tune a Batcher.
type BatcherOptions struct {
	// MaxItems bounds a batch (transaction mutations, message size).
	MaxItems int
	// MaxInFlight is how many batches run at once (1 against the Spanner
	// emulator, which runs one read-write transaction at a time).
	MaxInFlight int
	// Linger is how long a batch waits for company before it runs; zero
	// runs at once with whatever has queued.
	Linger time.Duration
	// Gather, without Linger, is a wait for company that follows the load:
	// a batch that follows one of several calls waits, Gather at a time,
	// until as many calls have queued as that one held and then while calls
	// keep arriving; it runs once a Gather passes with none, or MaxGather
	// has passed, or the batch is full. A call that finds the batcher idle
	// runs at once, so the wait is zero when idle and grows with the rate
	// of calls.
	Gather, MaxGather time.Duration
	// Timeout bounds one run; a batch serves many requests, so it does not
	// run on any one request's context. A run also ends by the earliest
	// deadline of its callers: what it does after that (a publish after
	// the commit) would answer nobody in time.
	Timeout time.Duration
}

// NewBatcher returns a Batcher calling run. run returns one result per item,
// in order, or an error that fails the whole batch.
func NewBatcher[T, R any](opts BatcherOptions, run func(ctx context.Context, items []T) ([]R, error)) *Batcher[T, R] {
	if opts.MaxItems < 1 {
		opts.MaxItems = 1
	}
	if opts.MaxInFlight < 1 {
		opts.MaxInFlight = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.MaxGather < opts.Gather {
		opts.MaxGather = opts.Gather
	}
	return &Batcher[T, R]{run: run, maxItems: opts.MaxItems, maxInFlight: opts.MaxInFlight, linger: opts.Linger,
		gather: opts.Gather, maxGather: opts.MaxGather, timeout: opts.Timeout}
}

// NewBatcherBy is NewBatcher whose batches each hold items of one key: a
// batch takes the oldest queued item and the queued items of its key, and
// the others keep their place for a later batch. Items that one run cannot
// serve alike (a read that must wait for the leader and one that need not)
// so never share a batch, while the batches of every key share MaxInFlight
// and take turns in the order their oldest items came.
func NewBatcherBy[T, R any, K comparable](opts BatcherOptions, key func(T) K, run func(ctx context.Context, items []T) ([]R, error)) *Batcher[T, R] {
	b := NewBatcher(opts, run)
	b.sameBatch = func(x, y T) bool { return key(x) == key(y) }
	return b
}

// Do adds item to the next batch and waits for its result. When ctx ends
// first, Do returns ctx's error, but the item may still be run: callers make
// items idempotent (a client retries after a timeout).
func (b *Batcher[T, R]) Do(ctx context.Context, item T) (R, error) {
	c := &call[T, R]{item: item, done: make(chan struct{})}
	c.deadline, _ = ctx.Deadline()
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		go b.work()
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}

// work runs batches until the queue is empty.
func (b *Batcher[T, R]) work() {
	last := 0 // the calls of the batch this worker ran before; 0: none
	for {
		switch {
		case b.linger > 0:
			b.mu.Lock()
			short := len(b.queue) < b.maxItems
			b.mu.Unlock()
			if short {
				time.Sleep(b.linger)
			}
		case b.gather > 0 && last > 1:
			b.gatherCalls(last)
		}
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.runBatch(batch)
		last = len(batch)
	}
}

// take removes the next batch from the queue: up to maxItems calls, the
// oldest first, all of the oldest's key (NewBatcherBy). b.mu is held.
func (b *Batcher[T, R]) take() []*call[T, R] {
	n := min(len(b.queue), b.maxItems)
	if b.sameBatch == nil || n == 0 {
		batch := b.queue[:n:n]
		b.queue = append([]*call[T, R](nil), b.queue[n:]...)
		return batch
	}
	head := b.queue[0].item
	var batch, rest []*call[T, R]
	for _, c := range b.queue {
		if len(batch) < b.maxItems && b.sameBatch(head, c.item) {
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	b.queue = rest
	return batch
}

// gatherCalls waits for company (BatcherOptions.Gather) after a batch of
// last calls: until as many have queued, the load just seen, and then while
// calls keep arriving.
func (b *Batcher[T, R]) gatherCalls(last int) {
	deadline := time.Now().Add(b.maxGather)
	b.mu.Lock()
	n := len(b.queue)
	b.mu.Unlock()
	for n < b.maxItems && time.Now().Before(deadline) {
		time.Sleep(min(b.gather, time.Until(deadline)))
		b.mu.Lock()
		m := len(b.queue)
		b.mu.Unlock()
		if m == n && m >= last {
			return
		}
		n = m
	}
}

// safeRun turns a panic in run into an error, so that no caller waits forever.
func (b *Batcher[T, R]) safeRun(ctx context.Context, items []T) (res []R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("batch.Batcher: run panicked: %v", p)
		}
	}()
	return b.run(ctx, items)
}

func (b *Batcher[T, R]) runBatch(batch []*call[T, R]) {
	items := make([]T, len(batch))
	deadline := time.Now().Add(b.timeout)
	for i, c := range batch {
		items[i] = c.item
		if !c.deadline.IsZero() && c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	res, err := b.safeRun(ctx, items)
	if err == nil && len(res) != len(items) {
		err = fmt.Errorf("batch.Batcher: %d results for %d items", len(res), len(items))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		close(c.done)
	}
}
