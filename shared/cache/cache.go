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
// use. An entry put with an expiry is dropped at it. When the map is full,
// Put drops the expired entries, then others at random (map order). A nil
// Map holds nothing: Get misses and Put does nothing.
type Map[K comparable, V any] struct {
	mu  sync.Mutex
	max int
	m   map[K]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time // zero: never
}

// New returns a Map of at most max entries; nil (a cache that holds
// nothing) if max is not positive.
func New[K comparable, V any](max int) *Map[K, V] {
	if max <= 0 {
		return nil
	}
	return &Map[K, V]{max: max, m: map[K]entry[V]{}}
}

// Get returns the value of k unless it has expired at now.
func (m *Map[K, V]) Get(k K, now time.Time) (V, bool) {
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
	if e.expired(now) {
		delete(m.m, k)
		return zero, false
	}
	return e.v, true
}

func (e entry[V]) expired(now time.Time) bool {
	return !e.expires.IsZero() && !now.Before(e.expires)
}

// Put sets the value of k until expires (zero: until it is dropped to make
// room or deleted); now is the time that decides which entries have expired
// when room is needed.
func (m *Map[K, V]) Put(k K, v V, expires, now time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[k]; !ok && len(m.m) >= m.max {
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
