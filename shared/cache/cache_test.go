package cache

import (
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestGetPutDelete(t *testing.T) {
	clk := &clock{t0}
	m := New[string, int](10, clk.now)
	if _, ok := m.Get("a"); ok {
		t.Fatal("an empty map answered")
	}
	m.Put("a", 1)
	m.Put("a", 2)
	clk.t = t0.Add(1000 * time.Hour)
	if v, ok := m.Get("a"); !ok || v != 2 {
		t.Fatalf("Get = %d, %v; want 2 without expiry", v, ok)
	}
	m.Delete("a")
	if _, ok := m.Get("a"); ok || m.Len() != 0 {
		t.Fatalf("after Delete: found %v, %d held", ok, m.Len())
	}
}

func TestExpiry(t *testing.T) {
	clk := &clock{t0}
	m := New[string, int](10, clk.now)
	m.PutUntil("a", 1, t0.Add(time.Minute))
	clk.t = t0.Add(time.Minute - time.Nanosecond)
	if v, ok := m.Get("a"); !ok || v != 1 {
		t.Fatalf("before expiry: %d, %v", v, ok)
	}
	clk.t = t0.Add(time.Minute)
	if _, ok := m.Get("a"); ok {
		t.Fatal("answered at its expiry")
	}
	if m.Len() != 0 {
		t.Errorf("an expired entry read is still held: %d", m.Len())
	}
}

// When full, a put drops the expired entries first, then others, and never
// holds more than its bound.
func TestBound(t *testing.T) {
	clk := &clock{t0}
	m := New[int, int](3, clk.now)
	m.Put(0, 0)
	m.Put(1, 1)
	m.PutUntil(2, 2, t0.Add(time.Second))
	clk.t = t0.Add(time.Second)
	m.Put(3, 3)
	for _, k := range []int{0, 1, 3} {
		if _, ok := m.Get(k); !ok {
			t.Errorf("key %d dropped, while an expired entry was there to drop", k)
		}
	}
	for i := range 100 {
		m.Put(10+i, i)
		if m.Len() > 3 {
			t.Fatalf("%d held, bound 3", m.Len())
		}
	}
	if _, ok := m.Get(109); !ok {
		t.Error("the entry just put is not held")
	}
	// Putting a held key again drops nothing.
	m.Put(109, 0)
	if m.Len() != 3 {
		t.Errorf("%d held after putting a held key, want 3", m.Len())
	}
}

func TestDeleteFunc(t *testing.T) {
	m := New[int, int](10, nil)
	for i := range 6 {
		m.Put(i, i*10)
	}
	m.DeleteFunc(func(k, v int) bool { return v != k*10 || k%2 == 0 })
	if m.Len() != 3 {
		t.Fatalf("%d held, want the 3 odd keys", m.Len())
	}
	for _, k := range []int{1, 3, 5} {
		if _, ok := m.Get(k); !ok {
			t.Errorf("key %d dropped", k)
		}
	}
}

func TestNilHoldsNothing(t *testing.T) {
	m := New[string, int](0, nil)
	if m != nil {
		t.Fatal("New(0) is not nil")
	}
	m.Put("a", 1)
	m.PutUntil("a", 1, t0)
	m.Delete("a")
	m.DeleteFunc(func(string, int) bool { return true })
	if _, ok := m.Get("a"); ok || m.Len() != 0 {
		t.Error("a nil map held an entry")
	}
}

func TestConcurrentUse(t *testing.T) {
	m := New[int, int](50, nil)
	now := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := (g*1000 + i) % 200
				m.PutUntil(k, i, now.Add(time.Duration(i)*time.Millisecond))
				m.Get(k)
				if i%100 == 0 {
					m.DeleteFunc(func(int, int) bool { return false })
				}
			}
		})
	}
	wg.Wait()
	if m.Len() > 50 {
		t.Errorf("%d held, bound 50", m.Len())
	}
}
