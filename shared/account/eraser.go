package account

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/videngage/engagement/shared/events"
)

// The stores an erasure works through, declared where they are used.
type (
	// Records keeps the erasure records (accountstore.Store).
	Records interface {
		Get(ctx context.Context, userID string) (Erasure, bool, error)
		Step(ctx context.Context, userID string, phase Phase, add Figures, advance bool) (Erasure, error)
	}
	// ContentEraser is a store of the user's own items (reactions, comments):
	// EraseSome removes up to limit of them, each leaving the counts
	// exactly once, and returns how many and the events to publish.
	ContentEraser interface {
		EraseSome(ctx context.Context, userID string, limit int) (int, []events.Event, error)
		EraseUserRows(ctx context.Context, userID string) error
	}
	// HistoryEraser is the watch history (historystore.Store).
	HistoryEraser interface {
		EraseEntries(ctx context.Context, userID string, limit int) (int, error)
		EraseLatest(ctx context.Context, userID string, limit int) (int, error)
	}
	// SettingsEraser is the history settings (historystore.Settings).
	SettingsEraser interface {
		EraseValues(ctx context.Context, userID string) error
		Delete(ctx context.Context, userID string) error
	}
)

// Step sizes: each step is one bounded transaction or bulk write.
const (
	reactionStep = 500
	commentStep  = 100
	historyStep  = 1000
)

// IdentityRetryFor is how long the Identity phase tries to delete the
// user's Identity Platform account, from when the erasure reached it, before
// it leaves the account in place (logged as an error, for an operator to
// delete) and lets the erasure finish: long enough to outlast an outage of
// the provider or a missing grant fixed the same day, short enough that no
// erasure stays open, with its refusals, for want of one call.
const IdentityRetryFor = 24 * time.Hour

// Eraser works account erasures.
type Eraser struct {
	Records   Records
	Reactions ContentEraser
	Comments  ContentEraser
	History   HistoryEraser
	Settings  SettingsEraser
	// RateLimits deletes the user's rows in Bigtable's rate_limits.
	RateLimits func(ctx context.Context, userID string) error
	// Exports deletes the record of the user's recent exports
	// (accountstore.Exports.EraseUser).
	Exports func(ctx context.Context, userID string) error
	// Identity deletes the user's Identity Platform account
	// (auth.AccountRecords.Delete); an account already gone counts as
	// deleted. Nil when the service reads no account records
	// (ACCOUNT_RECORDS_URL empty): the phase then has nothing to delete.
	Identity func(ctx context.Context, userID string) error
	// Counters publishes the counter events of removed reactions and
	// comments (their outbox rows are pending until counted; a lost
	// publish is relayed by the rollup).
	Counters events.Publisher
	// Settle is how long after the request the views' claims are kept: at
	// least as long as Pub/Sub may still redeliver a history message that
	// carries one of the user's watches.
	Settle time.Duration
	// Budget bounds one Run; the erasure goes on in the next message.
	Budget time.Duration
	Now    func() time.Time
}

// Run works the user's erasure, step after step, until it is done, has to
// wait at Settle, or has spent its Budget. more says another message should
// follow (the budget ran out with work left). Every step is idempotent and
// moves the record only when it finds its phase's work done, so a Run that
// dies anywhere is resumed by the next, and two Runs of one user at once
// change nothing twice.
func (e *Eraser) Run(ctx context.Context, userID string) (more bool, err error) {
	now := e.clock()
	deadline := now().Add(e.Budget)
	for {
		rec, ok, err := e.Records.Get(ctx, userID)
		if err != nil {
			return false, err
		}
		if !ok || !rec.Open() {
			return false, nil
		}
		if until := rec.RequestTime.Add(e.Settle); rec.Phase == Settle && now().Before(until) {
			if until.After(deadline) {
				// The sweep brings it back once settled.
				return false, nil
			}
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(until.Sub(now())):
			}
		}
		if err := e.step(ctx, rec); err != nil {
			return false, fmt.Errorf("account erasure at %s: %w", rec.Phase, err)
		}
		if now().After(deadline) {
			return true, nil
		}
	}
}

func (e *Eraser) clock() func() time.Time {
	if e.Now != nil {
		return e.Now
	}
	return time.Now
}

// step does one step of the record's phase and records it.
func (e *Eraser) step(ctx context.Context, rec Erasure) error {
	user, phase := rec.UserID, rec.Phase
	var add Figures
	advance := false
	switch phase {
	case Reactions, Comments:
		store, size := e.Reactions, reactionStep
		if phase == Comments {
			store, size = e.Comments, commentStep
		}
		n, evs, err := store.EraseSome(ctx, user, size)
		if err != nil {
			return err
		}
		if err := events.PublishAll(ctx, e.Counters, evs); err != nil {
			return err
		}
		if phase == Reactions {
			add.Reactions = int64(n)
		} else {
			add.Comments = int64(n)
		}
		advance = n == 0
	case History:
		n, err := e.History.EraseEntries(ctx, user, historyStep)
		if err != nil {
			return err
		}
		add.HistoryRows, advance = int64(n), n == 0
	case Rows:
		for _, erase := range []func(context.Context, string) error{
			e.Reactions.EraseUserRows, e.Comments.EraseUserRows, e.RateLimits, e.Exports, e.Settings.EraseValues,
		} {
			if err := erase(ctx, user); err != nil {
				return err
			}
		}
		advance = true
	case Settle:
		advance = true
	case Latest:
		n, err := e.History.EraseLatest(ctx, user, historyStep)
		if err != nil {
			return err
		}
		add.HistoryRows, advance = int64(n), n == 0
	case Identity:
		// A failed step records nothing, so UpdateTime is when the
		// erasure reached this phase.
		if e.Identity != nil {
			if err := e.Identity(ctx, user); err != nil {
				if e.clock()().Sub(rec.UpdateTime) < IdentityRetryFor {
					return err
				}
				slog.ErrorContext(ctx, "account erasure: the Identity Platform account could not be deleted; left in place for an operator",
					"userId", user, "since", rec.UpdateTime, "error", err.Error())
			}
		}
		advance = true
	case Settings:
		if err := e.Settings.Delete(ctx, user); err != nil {
			return err
		}
		advance = true
	default:
		return fmt.Errorf("no step for phase %q", phase)
	}
	add.Steps = 1
	_, err := e.Records.Step(ctx, user, phase, add, advance)
	return err
}
