package countsfn

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
)

// loader is a store's Public that counts its calls and answers likes = the
// number of calls so far for every id; while gate is non-nil it waits for it.
type loader struct {
	now   func() time.Time
	calls atomic.Int64
	gate  chan struct{}
	fail  atomic.Bool
}

func (l *loader) load(ctx context.Context, ids []string, _ time.Duration) (countstore.Snapshot, error) {
	n := l.calls.Add(1)
	if l.gate != nil {
		<-l.gate
	}
	if l.fail.Load() {
		return countstore.Snapshot{}, errors.New("backend down")
	}
	s := countstore.Snapshot{Values: map[string]counter.Values{}, ReadTime: l.now()}
	for _, id := range ids {
		s.Values[id] = counter.Values{Likes: n}
	}
	return s, nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestConcurrentIdenticalReadsShareOneQuery: requests missing the same ids
// while a read of them is in flight wait for it instead of reading again,
// even when nothing can be held.
func TestConcurrentIdenticalReadsShareOneQuery(t *testing.T) {
	l := &loader{now: time.Now, gate: make(chan struct{})}
	const n = 16
	var joined sync.WaitGroup
	joined.Add(n)
	c := &publicCache{load: l.load, ttl: time.Hour, max: 0, now: time.Now, joined: joined.Done}
	var wg sync.WaitGroup
	got := make([]int64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.get(context.Background(), []string{"b", "a"})
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = v["a"].Likes
		}()
	}
	joined.Wait() // every request is waiting on a read
	close(l.gate)
	wg.Wait()
	if calls := l.calls.Load(); calls != 1 {
		t.Errorf("%d concurrent identical reads made %d queries, want 1", n, calls)
	}
	for i, v := range got {
		if v != 1 {
			t.Errorf("request %d got likes %d, want the shared answer 1", i, v)
		}
	}
	if c.entries.Len() != 0 {
		t.Errorf("a cache bounded to 0 ids holds %d", c.entries.Len())
	}
}

// TestCacheHoldsForTTLWithinBound: a held id is served without a query until
// ttl has passed, then read again; at most max ids are held; errors are not
// held.
func TestCacheHoldsForTTLWithinBound(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	l := &loader{now: clk.now}
	c := &publicCache{load: l.load, ttl: time.Hour, max: 2, now: clk.now}
	ctx := context.Background()
	get := func(ids ...string) map[string]counter.Values {
		t.Helper()
		v, err := c.get(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	get("a", "b")
	if v := get("a", "b"); v["a"].Likes != 1 || l.calls.Load() != 1 {
		t.Errorf("within ttl: %v after %d queries, want the first answer from 1 query", v, l.calls.Load())
	}
	held, since, missing := c.peek([]string{"a", "b", "c"})
	if len(held) != 2 || len(missing) != 1 || missing[0] != "c" || !since.Equal(time.Unix(1000, 0)) {
		t.Errorf("peek: held %v since %v missing %v", held, since, missing)
	}
	get("c")
	if c.entries.Len() != 2 {
		t.Errorf("holds %d ids, bound 2", c.entries.Len())
	}
	clk.add(time.Hour + time.Second)
	if v := get("a"); v["a"].Likes != 3 {
		t.Errorf("after ttl: %v, want a new read (likes 3)", v)
	}
	l.fail.Store(true)
	clk.add(time.Hour + time.Second)
	if _, err := c.get(ctx, []string{"a"}); err == nil {
		t.Error("a failed read answered")
	}
	l.fail.Store(false)
	if v := get("a"); v["a"].Likes != 5 {
		t.Errorf("after a failure: %v, want a new read (likes 5)", v)
	}
}

// TestCacheOff: a ttl of zero reads every time and holds nothing.
func TestCacheOff(t *testing.T) {
	l := &loader{now: time.Now}
	c := &publicCache{load: l.load, max: 10, now: time.Now}
	for range 3 {
		if _, err := c.get(context.Background(), []string{"a"}); err != nil {
			t.Fatal(err)
		}
	}
	if l.calls.Load() != 3 || c.entries.Len() != 0 {
		t.Errorf("cache off: %d queries for 3 reads, %d held", l.calls.Load(), c.entries.Len())
	}
}
