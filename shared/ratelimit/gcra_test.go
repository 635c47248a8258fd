package ratelimit

import (
	"testing"
	"time"
)

func TestGCRA(t *testing.T) {
	l := GCRA{PerMinute: 60}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var tat time.Time
	for i := 0; i < 60; i++ {
		next, ok, _ := l.Allow(tat, now)
		if !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
		tat = next
	}
	_, ok, wait := l.Allow(tat, now)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("61st request: ok=%v wait=%v, want refused with a wait up to 1s", ok, wait)
	}
	if _, ok, _ := l.Allow(tat, now.Add(wait)); !ok {
		t.Fatal("refused after waiting Retry-After")
	}
	// After a quiet minute the whole burst is available again.
	later := now.Add(2 * time.Minute)
	for i := 0; i < 60; i++ {
		next, ok, _ := l.Allow(tat, later)
		if !ok {
			t.Fatalf("after a quiet minute request %d refused", i+1)
		}
		tat = next
	}
	if _, ok, _ := (GCRA{}).Allow(time.Time{}, now); !ok {
		t.Fatal("a zero limit must allow")
	}
}
