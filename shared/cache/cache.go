// Package cache holds Map, the bounded in-memory map that an instance keeps
// of facts that only save work (verified tokens, counts read, rows known to
// be gone): losing any entry costs a read or a verification again, never
// correctness.
package cache

import (
	"sync"
	"time"
)

// Map is a map of at most a fixed number of entries, safe for concurrent
// use. An entry put with an expiry (PutUntil) is dropped at it. When the map
// is full, a put drops the expired entries, then others at random (map
// order). A nil Map holds nothing: Get misses and a put does nothing.
type Map[K comparable, V any] struct {
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[K]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time // zero: never
}

// New returns a Map of at most max entries whose expiries are judged by the
// clock now (nil: time.Now); nil (a cache that holds nothing) if max is not
// positive.
func New[K comparable, V any](max int, now func() time.Time) *Map[K, V] {
	if max <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	return &Map[K, V]{max: max, now: now, m: map[K]entry[V]{}}
}

// Get returns the value of k unless it has expired.
func (m *Map[K, V]) Get(k K) (V, bool) {
	var zero V
	if m == nil {
		return zero, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[k]
	if !ok {
		return zero, false
	}
	if !e.expires.IsZero() && e.expired(m.now()) {
		delete(m.m, k)
		return zero, false
	}
	return e.v, true
}

func (e entry[V]) expired(now time.Time) bool {
	return !e.expires.IsZero() && !now.Before(e.expires)
}

// Put sets the value of k until it is dropped to make room or deleted.
func (m *Map[K, V]) Put(k K, v V) { m.PutUntil(k, v, time.Time{}) }

// PutUntil sets the value of k until expires (zero: as Put).
func (m *Map[K, V]) PutUntil(k K, v V, expires time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[k]; !ok && len(m.m) >= m.max {
		now := m.now()
		for old, e := range m.m {
			if e.expired(now) {
				delete(m.m, old)
			}
		}
		for old := range m.m {
			if len(m.m) < m.max {
				break
			}
			delete(m.m, old)
		}
	}
	m.m[k] = entry[V]{v: v, expires: expires}
}

// Delete drops k.
func (m *Map[K, V]) Delete(k K) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.m, k)
	m.mu.Unlock()
}

// DeleteFunc calls del for every entry, under the map's lock (del must not
// use the map), and drops those for which it returns true.
func (m *Map[K, V]) DeleteFunc(del func(K, V) bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, e := range m.m {
		if del(k, e.v) {
			delete(m.m, k)
		}
	}
}

// Len returns how many entries the map holds, expired ones not yet dropped
// included.
func (m *Map[K, V]) Len() int {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}
