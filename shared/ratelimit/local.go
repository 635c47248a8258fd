package ratelimit

import (
	"sync"
	"time"
)

// Local is a per-user limit that one instance keeps in memory: GCRA, with
// each user's TAT in a map instead of a Spanner row. It holds per instance
// only (a user whose requests reach n instances gets up to n times its
// limit), which is why Degrading falls back to the instance's Share of the
// limit while the shared store does not answer.
type Local struct {
	limit GCRA

	mu      sync.Mutex
	tats    map[string]time.Time
	sweptAt time.Time
}

// sweepEvery is how often Local forgets the users whose TAT has passed:
// such a user is as one never seen, so the map holds only the users of the
// last minute or so.
const sweepEvery = time.Minute

// NewLocal limits each user to perMinute actions a minute (0: no limit).
func NewLocal(perMinute int) *Local {
	return newLocal(GCRA{PerMinute: max(perMinute, 0)})
}

func newLocal(limit GCRA) *Local {
	return &Local{limit: limit, tats: map[string]time.Time{}}
}

// Allow counts one action of the user at now and reports how long to wait
// when it is over the limit (zero: admitted).
func (l *Local) Allow(userID string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.sweptAt) >= sweepEvery {
		for u, tat := range l.tats {
			if !tat.After(now) {
				delete(l.tats, u)
			}
		}
		l.sweptAt = now
	}
	next, ok, wait := l.limit.Allow(l.tats[userID], now)
	if !ok {
		return wait
	}
	l.tats[userID] = next
	return 0
}

// users is how many users the instance remembers (tests).
func (l *Local) users() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tats)
}
