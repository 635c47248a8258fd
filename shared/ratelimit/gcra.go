package ratelimit

import "time"

// GCRA is a per-user limit of at most PerMinute requests in any 60 seconds,
// kept as one timestamp per user (the generic cell rate algorithm): the
// theoretical arrival time (TAT) of the next request. The state is shared
// by every instance: the caller keeps it in a Spanner row read and written
// in the request's own transaction.
//
// A GCRA admits a burst and then one request per interval, so any 60
// seconds can hold the burst plus 60s/interval requests. To hold the limit
// over every 60 seconds (not only over aligned minutes) the two share it: a
// burst of half the limit (rounded up), then one request every
// 60s / (PerMinute - burst + 1). With a limit of 10: 5 at once, then one
// every 10 seconds.
type GCRA struct {
	PerMinute int
	// Span is the span PerMinute holds over when it is not a minute (zero:
	// a minute): a degraded instance's share of a limit (Share).
	Span time.Duration
}

// shape is the burst (in requests) and interval of the limit.
func (l GCRA) shape() (burst int, interval time.Duration) {
	span := l.Span
	if span <= 0 {
		span = time.Minute
	}
	burst = (l.PerMinute + 1) / 2
	n := time.Duration(l.PerMinute - burst + 1)
	return burst, (span + n - 1) / n // rounded up, or the span would hold one more
}

// Share is one instance's part of a per-user limit of perMinute while the
// shared store does not answer and each of instances instances (the
// function's maximum) decides alone: twice the limit split between them.
// With instances ≤ 2·perMinute it is ⌊2·perMinute/instances⌋ in any
// minute, so the instances together admit at most 2·perMinute in any
// minute, however a user's requests spread over them; with more instances
// it is one in any ⌈instances/(2·perMinute)⌉ minutes, so that span holds
// at most 2·perMinute a minute of it (docs/design/ratelimits.md).
func Share(perMinute, instances int) GCRA {
	if perMinute <= 0 {
		return GCRA{}
	}
	instances, twice := max(instances, 1), 2*perMinute
	if instances <= twice {
		return GCRA{PerMinute: twice / instances}
	}
	return GCRA{PerMinute: 1, Span: time.Duration((instances+twice-1)/twice) * time.Minute}
}

// Allow decides a request at now for a user whose stored TAT is tat (zero
// when the user has none). It returns the TAT to store when allowed, or how
// long to wait (Retry-After) when not.
func (l GCRA) Allow(tat, now time.Time) (next time.Time, ok bool, retryAfter time.Duration) {
	if l.PerMinute <= 0 {
		return tat, true, 0
	}
	burst, interval := l.shape()
	if tat.Before(now) {
		tat = now
	}
	// Admitted while the TAT is at most burst-1 intervals ahead of now.
	if wait := tat.Sub(now) - time.Duration(burst-1)*interval; wait > 0 {
		return time.Time{}, false, wait
	}
	return tat.Add(interval), true, 0
}
