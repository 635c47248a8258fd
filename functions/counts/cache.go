package countsfn

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/videngage/engagement/shared/cache"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
)

// refreshChunk is the most ids one refresh query reads.
const refreshChunk = 500

// fetchTimeout bounds a shared fetch, which no one request's deadline may
// cancel for the others waiting on it.
const fetchTimeout = 10 * time.Second

// publicCache holds the public counts of the ids this instance was asked for
// recently, each until ttl after Spanner's read timestamp (so the data's own
// age, Spanner's staleness included, and not the time a slow query waited
// before it ran, bounds it; Spanner's clock and the instance's agree to a
// few milliseconds on Google's infrastructure). The counts are the same for
// every caller, so one read serves them all:
//
//   - concurrent requests missing the same ids share one Spanner query
//     (singleflight);
//   - one background pass every ttl/2 re-reads, 500 ids a query, the ids
//     asked for since they were last read, so a hot video costs a read per
//     ttl/2 per instance however many ask for it, and requests do not wait
//     for expiries; an id not asked for in a ttl is dropped;
//   - at most max ids are held; beyond that, ids are read per request.
//
// A ttl of zero turns it off: every request reads Spanner itself (the
// benchmark's "before").
type publicCache struct {
	load         func(ctx context.Context, ids []string, maxStaleness time.Duration) (countstore.Snapshot, error)
	maxStaleness time.Duration
	ttl          time.Duration
	max          int
	now          func() time.Time
	// joined, when set, is called once a request waits on a shared read (a
	// test's way to know every request has joined).
	joined func()

	group singleflight.Group

	// mu makes each read-and-update of entries whole.
	mu         sync.Mutex
	entries    *cache.Map[string, *entry]
	refreshing bool
}

type entry struct {
	v        counter.Values
	readTime time.Time // Spanner's read timestamp: the data's age
	used     time.Time
}

func (c *publicCache) enabled() bool { return c.ttl > 0 }

// peek returns the held values of ids that are fresh enough, the oldest
// Spanner read timestamp among them, and the ids it does not hold.
func (c *publicCache) peek(ids []string) (held map[string]counter.Values, since time.Time, missing []string) {
	held = make(map[string]counter.Values, len(ids))
	if !c.enabled() {
		return held, time.Time{}, ids
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		e, ok := c.entries.Get(id)
		if !ok || now.Sub(e.readTime) > c.ttl {
			missing = append(missing, id)
			continue
		}
		e.used = now
		held[id] = e.v
		if since.IsZero() || e.readTime.Before(since) {
			since = e.readTime
		}
	}
	return held, since, missing
}

// get returns the public values of ids (unclamped; absent ids count zero),
// reading Spanner for the ones it does not hold.
func (c *publicCache) get(ctx context.Context, ids []string) (map[string]counter.Values, error) {
	held, _, missing := c.peek(ids)
	if len(missing) == 0 {
		return held, nil
	}
	if !c.enabled() {
		s, err := c.load(ctx, missing, c.maxStaleness)
		if err != nil {
			return nil, err
		}
		return s.Values, nil
	}
	key := slices.Sorted(slices.Values(missing))
	ch := c.group.DoChan(strings.Join(key, ","), func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		return c.fetch(fctx, key)
	})
	if c.joined != nil {
		c.joined()
	}
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		for id, v := range res.Val.(countstore.Snapshot).Values {
			held[id] = v
		}
		return held, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch reads ids and holds the answer (while there is room).
func (c *publicCache) fetch(ctx context.Context, ids []string) (countstore.Snapshot, error) {
	s, err := c.load(ctx, ids, c.maxStaleness)
	if err != nil {
		return s, err
	}
	c.hold(ids, s)
	return s, nil
}

// hold keeps the values of ids in s (absent: zero), read at s.ReadTime,
// unless a later read of them is held; while there is room.
func (c *publicCache) hold(ids []string, s countstore.Snapshot) {
	if !c.enabled() || len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = cache.New[string, *entry](c.max, nil)
	}
	for _, id := range ids {
		e, ok := c.entries.Get(id)
		if !ok {
			if c.entries.Len() >= c.max {
				continue
			}
			e = &entry{used: s.ReadTime}
			// The entries expire by use, which refresh judges.
			c.entries.Put(id, e)
		}
		if !e.readTime.After(s.ReadTime) {
			e.v, e.readTime = s.Values[id], s.ReadTime
		}
	}
	if !c.refreshing && c.entries.Len() > 0 {
		c.refreshing = true
		go c.refresh()
	}
}

// refresh re-reads the ids in use every ttl/2 and drops the others; it
// stops when none is left, and fetch starts it again.
func (c *publicCache) refresh() {
	for {
		time.Sleep(c.ttl / 2)
		now := c.now()
		var ids []string
		c.mu.Lock()
		c.entries.DeleteFunc(func(id string, e *entry) bool {
			if now.Sub(e.used) > c.ttl {
				return true
			}
			if now.Sub(e.readTime) >= c.ttl/2 && e.used.After(e.readTime) {
				// Asked for since it was read: worth reading again.
				ids = append(ids, id)
			}
			return false
		})
		if c.entries.Len() == 0 {
			c.refreshing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		slices.Sort(ids)
		for chunk := range slices.Chunk(ids, refreshChunk) {
			ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
			if _, err := c.fetch(ctx, chunk); err != nil {
				// The entries age out; requests read for themselves.
				slog.Warn("counts cache refresh failed", "ids", len(chunk), "error", err.Error())
			}
			cancel()
		}
	}
}
