package batch

import (
	"context"
	"time"
)

// GroupCommitOptions tune a GroupCommit.
type GroupCommitOptions struct {
	// Batched turns group commit on.
	Batched bool
	// MaxBatch bounds the requests of one transaction (and events of one
	// message; 200 when zero); MaxInFlight the transactions at once (1
	// against the emulator).
	MaxBatch    int
	MaxInFlight int
	// Linger is how long a batch waits for company; zero runs at once.
	Linger time.Duration
	// Gather and MaxGather are the wait for company that follows the load
	// (BatcherOptions.Gather).
	Gather, MaxGather time.Duration
}

// groupCommitTimeout bounds one batched run: a batch serves many requests,
// so it does not run on any one request's context.
const groupCommitTimeout = 20 * time.Second

// GroupCommit is the write path of a store writer: batched, the requests
// that arrive while a run is going are handled together by the next run of
// run (through a Batcher); unbatched (the benchmarks' naive baseline), each
// request is its own run, on the caller's context.
type GroupCommit[T, R any] struct {
	run     func(ctx context.Context, items []T) ([]R, error)
	batcher *Batcher[T, R]
}

// NewGroupCommit returns a GroupCommit calling run, which returns one result
// per item, in order, or an error that fails every item.
func NewGroupCommit[T, R any](o GroupCommitOptions, run func(ctx context.Context, items []T) ([]R, error)) *GroupCommit[T, R] {
	g := &GroupCommit[T, R]{run: run}
	if o.Batched {
		if o.MaxBatch <= 0 {
			o.MaxBatch = 200
		}
		g.batcher = NewBatcher(BatcherOptions{
			MaxItems: o.MaxBatch, MaxInFlight: o.MaxInFlight, Linger: o.Linger,
			Gather: o.Gather, MaxGather: o.MaxGather, Timeout: groupCommitTimeout,
		}, run)
	}
	return g
}

// Do runs item, in the next batch when batched, and returns its result.
func (g *GroupCommit[T, R]) Do(ctx context.Context, item T) (R, error) {
	if g.batcher != nil {
		return g.batcher.Do(ctx, item)
	}
	res, err := g.run(ctx, []T{item})
	if err != nil {
		var zero R
		return zero, err
	}
	return res[0], nil
}
