package ratelimit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// mostInAnyMinute is the largest number of times in any 60 seconds
// [t, t+60s): every such span that holds the most starts at one of them.
func mostInAnyMinute(times []time.Time) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, j := 0, 0; i < len(ts); i++ {
		for j < len(ts) && ts[j].Before(ts[i].Add(time.Minute)) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// requestStreams are generated request times over ten minutes: a client
// that sends as fast as it can, one that sends at random, one that bursts
// at the edges of each minute and one that waits for each refusal's
// Retry-After (the reason the last one is a function of the limiter).
func requestStreams(seed uint64, start time.Time) map[string][]time.Time {
	rng := rand.New(rand.NewPCG(seed, 1))
	var steady, random, edges []time.Time
	for at := time.Duration(0); at < 10*time.Minute; at += 50 * time.Millisecond {
		steady = append(steady, start.Add(at))
	}
	for at := time.Duration(0); at < 10*time.Minute; at += time.Duration(rng.Int64N(int64(3 * time.Second))) {
		random = append(random, start.Add(at))
	}
	for m := range 10 {
		edge := start.Add(time.Duration(m+1) * time.Minute)
		for i := range 200 {
			edges = append(edges, edge.Add(-time.Second+time.Duration(i)*10*time.Millisecond))
		}
	}
	return map[string][]time.Time{"as fast as it can": steady, "at random": random, "at the minute's edges": edges}
}

// TestGCRAHoldsOverAnyMinute sends generated request streams through the
// limit and counts the admissions in every 60 seconds of each: never more
// than the limit, where a GCRA with the whole minute as its burst admits
// nearly twice as many across the end of a burst.
func TestGCRAHoldsOverAnyMinute(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, perMinute := range []int{1, 2, 3, 5, 10, 30, 60, 120} {
		l := GCRA{PerMinute: perMinute}
		for name, stream := range requestStreams(uint64(perMinute), start) {
			var tat time.Time
			var admitted []time.Time
			for _, at := range stream {
				if next, ok, _ := l.Allow(tat, at); ok {
					tat = next
					admitted = append(admitted, at)
				}
			}
			if most := mostInAnyMinute(admitted); most > perMinute {
				t.Errorf("%d a minute, a client sending %s: %d admitted in one 60 s span", perMinute, name, most)
			}
		}
		// A client that waits each Retry-After out is admitted again then,
		// and over ten minutes gets at least the sustained rate.
		var tat time.Time
		var admitted []time.Time
		for at := start; at.Before(start.Add(10 * time.Minute)); {
			next, ok, wait := l.Allow(tat, at)
			if !ok {
				if wait <= 0 || wait > time.Minute {
					t.Fatalf("%d a minute: Retry-After %v", perMinute, wait)
				}
				if _, ok, _ := l.Allow(tat, at.Add(wait)); !ok {
					t.Fatalf("%d a minute: refused after waiting Retry-After %v", perMinute, wait)
				}
				at = at.Add(wait)
				continue
			}
			tat = next
			admitted = append(admitted, at)
		}
		if most := mostInAnyMinute(admitted); most > perMinute {
			t.Errorf("%d a minute, a client waiting each Retry-After: %d admitted in one 60 s span", perMinute, most)
		}
		burst, _ := l.shape()
		if sustained := perMinute - burst + 1; len(admitted) < 10*sustained {
			t.Errorf("%d a minute: %d admitted in ten minutes, want at least %d", perMinute, len(admitted), 10*sustained)
		}
	}
}

func TestGCRA(t *testing.T) {
	l := GCRA{PerMinute: 10} // a burst of 5, then one every 10 s
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var tat time.Time
	for i := range 5 {
		next, ok, _ := l.Allow(tat, now)
		if !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
		tat = next
	}
	_, ok, wait := l.Allow(tat, now)
	if ok || wait != 10*time.Second {
		t.Fatalf("request after the burst: ok=%v wait=%v, want refused with a wait of 10s", ok, wait)
	}
	if _, ok, _ := l.Allow(tat, now.Add(wait-time.Millisecond)); ok {
		t.Fatal("admitted before Retry-After")
	}
	if _, ok, _ := l.Allow(tat, now.Add(wait)); !ok {
		t.Fatal("refused after waiting Retry-After")
	}
	// After a quiet minute the whole burst is available again.
	later := now.Add(2 * time.Minute)
	for i := range 5 {
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
