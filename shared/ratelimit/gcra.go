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
}

// shape is the burst (in requests) and interval of the limit.
func (l GCRA) shape() (burst int, interval time.Duration) {
	burst = (l.PerMinute + 1) / 2
	n := time.Duration(l.PerMinute - burst + 1)
	return burst, (time.Minute + n - 1) / n // rounded up, or the span would hold one more

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
