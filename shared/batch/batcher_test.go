package batch

import (
	"context"
	"errors"
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
