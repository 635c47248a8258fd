package account

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/videngage/engagement/shared/events"
)

// Starter asks for a user's erasure: what DELETE /v1/me writes, and what a
// replay of the erasure log writes again after a restore. Each write is
// idempotent, so a failure is retried whole:
//  0. the entry in the erasure log, first, so that no erasure any store
//     knows of, and none acknowledged, is missing from it (a replay's entry
//     covers the backups taken between the restore and the replay's
//     erasure, which hold the user again);
//  1. the record in Spanner (accountstore.Store.Request: an open one is
//     left as it is, a finished one started again): from its commit on, the
//     user's reaction and comment writes are refused in their own
//     transactions, and any step finds it;
//  2. the mark in the history settings: history writes are refused;
//  3. the message that starts EraseAccount (ResumeErasures sends another
//     for any erasure that does not move, so a lost one only delays it).
type Starter struct {
	Log interface {
		Append(ctx context.Context, userID string, at time.Time) error
	}
	Records interface {
		Request(ctx context.Context, userID string) (Erasure, error)
	}
	Settings interface {
		MarkErasing(ctx context.Context, userID string) error
	}
	// Next publishes on the erasure topic.
	Next events.Publisher
	Now  func() time.Time
}

// Start asks for the user's erasure.
func (s Starter) Start(ctx context.Context, userID string) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if err := s.Log.Append(ctx, userID, now()); err != nil {
		return err
	}
	if _, err := s.Records.Request(ctx, userID); err != nil {
		return err
	}
	if err := s.Settings.MarkErasing(ctx, userID); err != nil {
		return err
	}
	data, err := Message{UserID: userID}.Encode()
	if err != nil {
		return err
	}
	_, err = s.Next.Publish(ctx, data, map[string]string{"kind": "account-erasure"})
	return err
}

// LogReader reads the erasure log (accountstore.ErasureLog).
type LogReader interface {
	// Since returns the entries of the erasures asked for at or after
	// since (every entry when since is zero), oldest first.
	Since(ctx context.Context, since time.Time) ([]LogEntry, error)
}

// ReplayReport is what a replay of the log did.
type ReplayReport struct {
	// Entries were read from the log; Users is how many users they name.
	Entries, Users int
	// Started is how many of the users' erasures were asked for again.
	Started int
	// Failed are the users whose erasure could not be asked for (a backend
	// down): a replay run again asks for them, and for the others again,
	// which changes nothing for those.
	Failed []string
}

// ReplayLog asks again for the erasure of every user the log holds from
// since on (zero: the whole log), once each, in the order of their latest
// entry. After a restore the stores hold what they held at the restore
// point, erased users' data included; a new erasure of each user erased
// since removes it again, and every step of it is idempotent against what
// it finds, so data the restore left erased, or an erasure the restore left
// open, is not counted twice. dryRun reads the log and asks for nothing.
// A user whose start fails does not stop the others.
func ReplayLog(ctx context.Context, log LogReader, start func(ctx context.Context, userID string) error, since time.Time, dryRun bool) (ReplayReport, error) {
	entries, err := log.Since(ctx, since)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("account.ReplayLog: read the log: %w", err)
	}
	latest := map[string]time.Time{}
	for _, e := range entries {
		if e.RequestTime.After(latest[e.UserID]) {
			latest[e.UserID] = e.RequestTime
		}
	}
	users := make([]string, 0, len(latest))
	for u := range latest {
		users = append(users, u)
	}
	slices.SortFunc(users, func(a, b string) int {
		if c := latest[a].Compare(latest[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	rep := ReplayReport{Entries: len(entries), Users: len(users)}
	if dryRun {
		return rep, nil
	}
	for _, u := range users {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := start(ctx, u); err != nil {
			rep.Failed = append(rep.Failed, u)
			continue
		}
		rep.Started++
	}
	if len(rep.Failed) > 0 {
		return rep, fmt.Errorf("account.ReplayLog: %d of %d erasures not asked for again; run the replay again", len(rep.Failed), len(users))
	}
	return rep, nil
}
