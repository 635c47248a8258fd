package ratelimit

import "time"

// GCRA is a per-user limit of PerMinute requests a minute, with a burst
// of the whole minute's allowance, kept as one timestamp per user (the
// generic cell rate algorithm): the theoretical arrival time (TAT) of the
// next request. The state is shared by every instance: the caller keeps it
// in a Spanner row read and written in the request's own transaction.
type GCRA struct {
	PerMinute int
}

// Allow decides a request at now for a user whose stored TAT is tat (zero
// when the user has none). It returns the TAT to store when allowed, or how
// long to wait (Retry-After) when not.
func (l GCRA) Allow(tat, now time.Time) (next time.Time, ok bool, retryAfter time.Duration) {
	if l.PerMinute <= 0 {
		return tat, true, 0
	}
	interval := time.Minute / time.Duration(l.PerMinute)
	burst := time.Minute // PerMinute requests at once, then one per interval
	if tat.Before(now) {
		tat = now
	}
	next = tat.Add(interval)
	if wait := next.Sub(now) - burst; wait > 0 {
		return time.Time{}, false, wait
	}
	return next, true, 0
}
