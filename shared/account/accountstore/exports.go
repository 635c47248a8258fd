package accountstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/errs"
)

// ExportsCollection holds one document per user who exported lately: the
// start times of the last day's exports and the running one's lease
// (topology.json).
const ExportsCollection = "accountExports"

// Exports keeps each user's exports under account.ExportLimit, in
// Firestore: a document per user, read and written in one transaction per
// start, so the limit holds across instances.
type Exports struct {
	c     *firestore.Client
	limit account.ExportLimit
	now   func() time.Time
}

// NewExports limits each user to perDay exports a day, one at a time
// (perDay ≤ 0: no limit).
func NewExports(c *firestore.Client, perDay int) *Exports {
	return &Exports{c: c, limit: account.ExportLimit{PerDay: max(perDay, 0)}, now: time.Now}
}

type exportsDoc struct {
	Starts       []time.Time `firestore:"starts"`
	Lease        string      `firestore:"lease"`
	RunningUntil time.Time   `firestore:"runningUntil"`
}

// exportDocID is a user's document id: base64url of the user id behind a
// letter, since user ids may hold any character and document ids may not.
func exportDocID(userID string) string {
	return "u" + base64.RawURLEncoding.EncodeToString([]byte(userID))
}

// Begin starts an export of the user that runs at most timeout and returns
// its lease, or refuses it with *errs.RateLimitedError: "exports at once"
// while another runs, "exports a day" over the daily limit.
func (e *Exports) Begin(ctx context.Context, userID string, timeout time.Duration) (lease string, err error) {
	if e.limit.PerDay <= 0 {
		return "", nil
	}
	lease = rand.Text()
	ref := e.c.Collection(ExportsCollection).Doc(exportDocID(userID))
	var refused error
	err = e.c.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		refused = nil
		var d exportsDoc
		snap, err := tx.Get(ref)
		switch {
		case status.Code(err) == codes.NotFound:
		case err != nil:
			return err
		default:
			if err := snap.DataTo(&d); err != nil {
				return err
			}
		}
		now := e.now().UTC()
		next, running, wait := e.limit.Begin(account.Exports{Starts: d.Starts, Lease: d.Lease, RunningUntil: d.RunningUntil}, now, now.Add(timeout), lease)
		if wait > 0 {
			what := "exports a day"
			if running {
				what = "exports at once (one of your account's is running)"
			}
			refused = &errs.RateLimitedError{What: what, RetryAfter: wait}
			return nil
		}
		return tx.Set(ref, exportsDoc{Starts: next.Starts, Lease: next.Lease, RunningUntil: next.RunningUntil})
	})
	if err != nil {
		return "", errs.Backend("accountstore.Exports.Begin", err)
	}
	if refused != nil {
		return "", refused
	}
	return lease, nil
}

// End marks the user's export of lease over, so the next may start; an
// export that never ends holds the user only until its deadline.
func (e *Exports) End(ctx context.Context, userID, lease string) error {
	if lease == "" {
		return nil
	}
	ref := e.c.Collection(ExportsCollection).Doc(exportDocID(userID))
	err := e.c.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(ref)
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		var d exportsDoc
		if err := snap.DataTo(&d); err != nil {
			return err
		}
		if d.Lease != lease {
			return nil
		}
		return tx.Update(ref, []firestore.Update{{Path: "lease", Value: ""}, {Path: "runningUntil", Value: time.Time{}}})
	})
	if err != nil {
		return errs.Backend("accountstore.Exports.End", err)
	}
	return nil
}

// EraseUser deletes the user's document (the account erasure).
func (e *Exports) EraseUser(ctx context.Context, userID string) error {
	if _, err := e.c.Collection(ExportsCollection).Doc(exportDocID(userID)).Delete(ctx); err != nil && status.Code(err) != codes.NotFound {
		return errs.Backend("accountstore.Exports.EraseUser", fmt.Errorf("delete %s: %w", userID, err))
	}
	return nil
}
