// Package eraseaccountfn is the EraseAccount event function: it works account
// erasures (DELETE /v1/me), one user a message, a bounded run at a time.
//
// The erasure's state is its record in Spanner, not the message: any
// message for a user resumes the erasure where the record says it is. A run
// that spends its budget with work left publishes the next message for the
// user and acknowledges its own; a run that fails (a backend down) or dies
// is redelivered and resumes. A message for a user with no open erasure
// changes nothing, so redeliveries, duplicates and the sweep's messages are
// harmless.
package eraseaccountfn

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterPush("EraseAccount", host.NeedSpanner|host.NeedBigtable|host.NeedFirestore|host.NeedPubSub,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			cfg := c.Config
			db := spannerdb.Wrap(c.Spanner, cfg)
			// The Identity Platform accounts (ACCOUNT_RECORDS_URL, or the
			// local stack's issuer): the erasure deletes the user's last.
			records, err := auth.AccountRecordsOf(ctx, cfg)
			if err != nil {
				return nil, err
			}
			e := &account.Eraser{
				Records:   accountstore.New(db),
				Reactions: reactionstore.New(db),
				Comments:  commentstore.New(db, 0),
				History:   historystore.New(c.Bigtable),
				Settings:  historystore.NewSettings(c.Firestore),
				RateLimits: func(ctx context.Context, userID string) error {
					return ratelimit.EraseUser(ctx, c.BigtableTx, userID)
				},
				Exports:  accountstore.NewExports(c.Firestore, 0).EraseUser,
				Counters: bus.NewPublisher(c.PubSub, cfg.PubSub.CounterTopic),
				Settle:   cfg.Erasure.Settle,
				Budget:   cfg.Erasure.Budget,
			}
			if records != nil {
				e.Identity = records.Delete
			}
			return New(e, bus.NewPublisher(c.PubSub, cfg.PubSub.ErasureTopic), c.Metrics), nil
		})
}

const name = "EraseAccount"

// Eraser works one user's erasure (account.Eraser).
type Eraser interface {
	Run(ctx context.Context, userID string) (more bool, err error)
}

// New returns the event function's push handler (host.Push); next publishes
// the follow-up message of an erasure that has work left. m may be nil.
func New(e Eraser, next events.Publisher, m *telemetry.Metrics) http.Handler {
	return host.Push(name, m, func(ctx context.Context, msg bus.Message) error {
		am, err := account.DecodeMessage(msg.Data)
		if err != nil {
			return fmt.Errorf("%w: %w", bus.ErrPoison, err)
		}
		more, err := e.Run(ctx, am.UserID)
		if err != nil {
			slog.WarnContext(ctx, "eraseaccount: step failed; Pub/Sub will redeliver", "messageId", msg.ID, "error", err.Error())
			return err
		}
		if more {
			if _, err := next.Publish(ctx, msg.Data, map[string]string{"kind": "account-erasure"}); err != nil {
				return err
			}
		}
		return nil
	})
}
