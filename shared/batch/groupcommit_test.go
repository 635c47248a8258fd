package batch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

func TestGroupCommitUnbatchedRunsEachItemOnTheCallersContext(t *testing.T) {
	var sizes []int
	g := NewGroupCommit(GroupCommitOptions{}, func(ctx context.Context, items []int) ([]int, error) {
		if ctx.Value(ctxKey{}) != "caller" {
			t.Error("unbatched run is not on the caller's context")
		}
		sizes = append(sizes, len(items))
		if items[0] < 0 {
			return nil, errors.New("negative")
		}
		return []int{items[0] * 2}, nil
	})
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	for i := range 3 {
		if got, err := g.Do(ctx, i); err != nil || got != 2*i {
			t.Errorf("Do(%d) = %d, %v; want %d", i, got, err, 2*i)
		}
	}
	if got, err := g.Do(ctx, -1); err == nil || got != 0 {
		t.Errorf("Do(-1) = %d, %v; want the run's error and a zero result", got, err)
	}
	if len(sizes) != 4 || sizes[0] != 1 || sizes[3] != 1 {
		t.Errorf("run sizes %v, want four runs of one", sizes)
	}
}

func TestGroupCommitBatchedGroupsConcurrentItems(t *testing.T) {
	// In a bubble, synctest.Wait returns once every goroutine waits.
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		var sizes []int
		g := NewGroupCommit(GroupCommitOptions{Batched: true, MaxInFlight: 1}, func(ctx context.Context, items []int) ([]int, error) {
			if ctx.Value(ctxKey{}) != nil {
				t.Error("a batch ran on one caller's context")
			}
			mu.Lock()
			sizes = append(sizes, len(items))
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				<-release
			}
			out := make([]int, len(items))
			for i, v := range items {
				out[i] = v + 100
			}
			return out, nil
		})
		ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
		var wg sync.WaitGroup
		wg.Go(func() {
			if got, err := g.Do(ctx, 0); err != nil || got != 100 {
				t.Errorf("Do(0) = %d, %v", got, err)
			}
		})
		// Wait until the first run holds the only slot, then queue more.
		synctest.Wait()
		const n = 10
		for i := 1; i <= n; i++ {
			wg.Go(func() {
				if got, err := g.Do(ctx, i); err != nil || got != i+100 {
					t.Errorf("Do(%d) = %d, %v", i, got, err)
				}
			})
		}
		// Wait until all of them queue behind it, then let it finish.
		synctest.Wait()
		close(release)
		wg.Wait()
		total := 0
		for _, s := range sizes {
			total += s
		}
		if total != n+1 || len(sizes) != 2 || sizes[1] != n {
			t.Errorf("run sizes %v: want the first item alone, then the %d queued behind it in one run", sizes, n)
		}
	})
}

// A batch ends by its earliest caller's deadline: the publish after a commit
// (events.PublishCommitted, bounded by the run's deadline) then leaves time
// to answer the caller, instead of outlasting its request.
func TestGroupCommitBatchEndsByItsEarliestCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan time.Time, 2)
		g := NewGroupCommit(GroupCommitOptions{Batched: true, MaxInFlight: 1, Linger: time.Millisecond}, func(ctx context.Context, items []int) ([]int, error) {
			d, _ := ctx.Deadline()
			got <- d
			return items, nil
		})
		start := time.Now()
		soon, cancelSoon := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancelSoon()
		later, cancelLater := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancelLater()
		var wg sync.WaitGroup
		for _, ctx := range []context.Context{later, soon} {
			wg.Go(func() {
				if _, err := g.Do(ctx, 1); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if d := <-got; !d.Equal(start.Add(3 * time.Second)) {
			t.Errorf("the batch's deadline is %v after its callers came, want the earliest caller's 3s", d.Sub(start))
		}
		if len(got) != 0 {
			t.Errorf("the two callers ran in two batches")
		}
		// No caller deadline: the batch's own timeout.
		start = time.Now()
		if _, err := g.Do(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if d := <-got; !d.Equal(start.Add(time.Millisecond + groupCommitTimeout)) { // after the linger
			t.Errorf("without a caller deadline the batch's deadline is %v away, want the linger and %v", d.Sub(start), groupCommitTimeout)
		}
		time.Sleep(time.Second) // the worker lingers, finds the queue empty and stops
		synctest.Wait()
	})
}
