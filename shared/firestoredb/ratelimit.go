package firestoredb

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/shared/httpx"
)

// RateLimitCollection holds the rate-limit windows (topology.json); the
// documents carry expireAt for Firestore's TTL policy.
const RateLimitCollection = "rateLimits"

// RateLimiter admits up to Limit actions of one kind per user per minute,
// counted in Firestore so that the limit holds across every function
// instance. Windows are fixed minutes; one document per user, kind and minute.
type RateLimiter struct {
	c     *firestore.Client
	kind  string
	limit int
	now   func() time.Time
}

// NewRateLimiter limits kind to limit per minute.
func NewRateLimiter(c *firestore.Client, kind string, limit int) *RateLimiter {
	return &RateLimiter{c: c, kind: kind, limit: limit, now: time.Now}
}

type window struct {
	Count    int       `firestore:"count"`
	ExpireAt time.Time `firestore:"expireAt"`
}

// Allow counts one action of the user, or says how long to wait when the
// user is over the limit (the refused action is not counted). A nil limiter
// admits everything.
func (l *RateLimiter) Allow(ctx context.Context, userID string) (time.Duration, error) {
	if l == nil {
		return 0, nil
	}
	now := l.now().UTC()
	start := now.Truncate(time.Minute)
	end := start.Add(time.Minute)
	ref := l.c.Collection(RateLimitCollection).Doc(fmt.Sprintf("%s-%s-%d", l.kind, DocID(userID), start.Unix()))
	var wait time.Duration
	err := l.c.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		wait = 0
		var w window
		snap, err := tx.Get(ref)
		switch {
		case status.Code(err) == codes.NotFound:
		case err != nil:
			return err
		default:
			if err := snap.DataTo(&w); err != nil {
				return err
			}
		}
		if w.Count >= l.limit {
			wait = end.Sub(now)
			return nil
		}
		return tx.Set(ref, window{Count: w.Count + 1, ExpireAt: end.Add(time.Minute)})
	})
	if err != nil {
		return 0, fmt.Errorf("%w: rate limit: %v", httpx.ErrBackendUnavailable, err)
	}
	return wait, nil
}
