package batch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestBatcherGroupsConcurrentCalls(t *testing.T) {
	// In a bubble, synctest.Wait returns once every goroutine waits: the
	// queued calls are all queued, however slow the machine.
	synctest.Test(t, func(t *testing.T) {
		var runs, biggest atomic.Int64
		release := make(chan struct{})
		b := NewBatcher(BatcherOptions{MaxItems: 50, MaxInFlight: 1}, func(ctx context.Context, items []int) ([]int, error) {
			if runs.Add(1) == 1 {
				<-release // hold the first batch so that the others queue
			}
			if n := int64(len(items)); n > biggest.Load() {
				biggest.Store(n)
			}
			out := make([]int, len(items))
			for i, v := range items {
				out[i] = v * 2
			}
			return out, nil
		})
		var wg sync.WaitGroup
		errs := make(chan error, 101)
		call := func(i int) {
			defer wg.Done()
			got, err := b.Do(context.Background(), i)
			if err != nil || got != 2*i {
				errs <- errors.New("wrong result")
			}
		}
		wg.Add(1)
		go call(0)
		synctest.Wait() // the first batch runs and holds
		if runs.Load() != 1 {
			t.Fatalf("%d runs before the release, want 1", runs.Load())
		}
		for i := 1; i <= 100; i++ {
			wg.Add(1)
			go call(i)
		}
		synctest.Wait() // the other 100 queue behind it
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if r := runs.Load(); r != 3 {
			t.Errorf("101 calls took %d runs, want the queued 100 in 2 batches of 50 (3 runs)", r)
		}
		if biggest.Load() != 50 {
			t.Errorf("largest batch %d, want MaxItems 50", biggest.Load())
		}
	})
}

func TestBatcherErrorsAndPanics(t *testing.T) {
	boom := errors.New("boom")
	b := NewBatcher(BatcherOptions{MaxItems: 10}, func(ctx context.Context, items []int) ([]int, error) {
		if items[0] == 1 {
			return nil, boom
		}
		if items[0] == 2 {
			panic("bad")
		}
		return nil, nil // wrong count
	})
	if _, err := b.Do(context.Background(), 1); !errors.Is(err, boom) {
		t.Errorf("batch error: %v", err)
	}
	if _, err := b.Do(context.Background(), 2); err == nil {
		t.Error("panic not turned into an error")
	}
	if _, err := b.Do(context.Background(), 3); err == nil {
		t.Error("wrong result count not an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := NewBatcher(BatcherOptions{MaxItems: 1, Linger: time.Second}, func(ctx context.Context, items []int) ([]int, error) { return items, nil })
	if _, err := slow.Do(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v", err)
	}
}

// TestBatcherGatherFollowsLoad: with Gather, closed-loop callers that come
// back a moment after their answer all join the next batch instead of
// alternating between two half batches, and a call to an idle batcher runs
// at once.
func TestBatcherGatherFollowsLoad(t *testing.T) {
	const clients, calls = 10, 20
	run := func(o BatcherOptions) (runs int64) {
		synctest.Test(t, func(t *testing.T) {
			var n atomic.Int64
			b := NewBatcher(o, func(ctx context.Context, items []int) ([]int, error) {
				n.Add(1)
				time.Sleep(5 * time.Millisecond) // the transaction
				return items, nil
			})
			var wg sync.WaitGroup
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Staggered starts: the first batch holds one call.
					time.Sleep(time.Duration(c) * time.Microsecond)
					for i := range calls {
						if _, err := b.Do(context.Background(), i); err != nil {
							t.Error(err)
							return
						}
						time.Sleep(time.Millisecond) // the answer's way back, the next request's way in
					}
				}()
			}
			wg.Wait()
			runs = n.Load()
			time.Sleep(time.Second) // the worker's last wait for company ends
		})
		return runs
	}
	plain := run(BatcherOptions{MaxItems: 50, MaxInFlight: 1})
	gathered := run(BatcherOptions{MaxItems: 50, MaxInFlight: 1, Gather: 2 * time.Millisecond, MaxGather: 20 * time.Millisecond})
	// Without: batches of 1 and 9 take turns. With: after the first two,
	// every batch holds all ten callers.
	if plain < 2*calls {
		t.Errorf("without Gather: %d runs for %d closed-loop calls, want the alternating half batches (≥ %d)", plain, clients*calls, 2*calls)
	}
	if gathered > calls+2 {
		t.Errorf("with Gather: %d runs for %d closed-loop calls, want every batch after the first two whole (≤ %d)", gathered, clients*calls, calls+2)
	}

	// Idle: a lone call runs at once, with no wait for company.
	synctest.Test(t, func(t *testing.T) {
		b := NewBatcher(BatcherOptions{MaxItems: 50, Gather: time.Millisecond, MaxGather: 20 * time.Millisecond},
			func(ctx context.Context, items []int) ([]int, error) { return items, nil })
		for range 3 {
			start := time.Now()
			if _, err := b.Do(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != 0 {
				t.Errorf("a lone call waited %v, want 0", d)
			}
			time.Sleep(time.Second)
		}
	})

	// A steady stream: the wait stops at MaxGather.
	synctest.Test(t, func(t *testing.T) {
		var sizes []int
		var mu sync.Mutex
		b := NewBatcher(BatcherOptions{MaxItems: 1000, MaxInFlight: 1, Gather: 2 * time.Millisecond, MaxGather: 10 * time.Millisecond},
			func(ctx context.Context, items []int) ([]int, error) {
				mu.Lock()
				sizes = append(sizes, len(items))
				mu.Unlock()
				time.Sleep(time.Millisecond)
				return items, nil
			})
		var wg sync.WaitGroup
		for i := range 400 { // one call every 100 µs for 40 ms
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 100 * time.Microsecond)
				b.Do(context.Background(), i)
			}()
		}
		wg.Wait()
		time.Sleep(time.Second)
		for _, n := range sizes {
			// At most MaxGather plus one run of calls, 10 per ms.
			if n > 115 {
				t.Errorf("a batch of %d calls: the wait went past MaxGather (batches %v)", n, sizes)
			}
		}
		if len(sizes) > 8 {
			t.Errorf("%d batches for 40 ms of steady calls, want waits of about MaxGather (batches %v)", len(sizes), sizes)
		}
	})
}

// TestBatcherByKeepsKeysApart: a batch holds the oldest queued call and the
// queued calls of its key only, the others run in a later batch in their
// order, and the batches of every key share MaxInFlight.
func TestBatcherByKeepsKeysApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var batches [][]int
		var running, most int
		release := make(chan struct{})
		odd := func(i int) bool { return i%2 == 1 }
		b := NewBatcherBy(BatcherOptions{MaxItems: 3, MaxInFlight: 2}, odd, func(ctx context.Context, items []int) ([]int, error) {
			mu.Lock()
			batches = append(batches, items)
			running++
			most = max(most, running)
			first := len(batches) <= 2
			mu.Unlock()
			if first {
				<-release // hold the first two batches so that the others queue
			}
			mu.Lock()
			running--
			mu.Unlock()
			return items, nil
		})
		var wg sync.WaitGroup
		call := func(i int) {
			wg.Go(func() {
				if got, err := b.Do(context.Background(), i); err != nil || got != i {
					t.Errorf("Do(%d) = %d, %v", i, got, err)
				}
			})
			synctest.Wait() // queued in this order
		}
		call(0)
		call(1)
		for _, i := range []int{3, 2, 5, 7, 4, 9} {
			call(i)
		}
		close(release)
		wg.Wait()
		// Two workers run at once: batches may start in another order.
		slices.SortFunc(batches, func(x, y []int) int { return x[0] - y[0] })
		if want := [][]int{{0}, {1}, {2, 4}, {3, 5, 7}, {9}}; !slices.EqualFunc(batches, want, slices.Equal) {
			t.Errorf("batches %v, want %v", batches, want)
		}
		if most > 2 {
			t.Errorf("%d batches ran at once, want at most MaxInFlight (2) over both keys", most)
		}
	})
}
