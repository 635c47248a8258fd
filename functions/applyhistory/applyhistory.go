// Package applyhistory is the ApplyHistory event function: it writes the
// Bigtable rows of each recorded watch published on the history topic.
package applyhistory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/videngage/engagement/shared/bigtabledb"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/platform"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	platform.RegisterCloudEvent("ApplyHistory", platform.NeedBigtable,
		func(ctx context.Context, c *platform.Clients) (func(context.Context, event.Event) error, error) {
			return New(bigtabledb.NewHistory(c.Bigtable), c.Metrics), nil
		})
}

// Store applies a watch idempotently.
type Store interface {
	Apply(ctx context.Context, w history.Watch) error
}

// New returns the event function. It returns an error only when a retry is
// wanted; a message that can never be applied is logged and returned as an
// error too, so that Pub/Sub dead-letters it after the configured attempts
// instead of losing it (other messages are not held up behind it).
// m may be nil.
func New(store Store, m *telemetry.Metrics) func(context.Context, event.Event) error {
	return func(ctx context.Context, e event.Event) (err error) {
		msg, err := bus.FromCloudEvent(e)
		if err != nil {
			return poison(ctx, m, e.ID(), err)
		}
		ctx, end := telemetry.StartConsumerSpan(ctx, name, msg.ID, msg.Attributes)
		defer func() { end(err) }()
		w, err := history.DecodeWatch(msg.Data)
		if err != nil {
			return poison(ctx, m, msg.ID, fmt.Errorf("%w: %v", bus.ErrPoison, err))
		}
		if err := store.Apply(ctx, w); err != nil {
			return fmt.Errorf("applyhistory: %s: %w", w.EventID, err)
		}
		m.EventsApplied(ctx, name, 1)
		return nil
	}
}

const name = "ApplyHistory"

func poison(ctx context.Context, m *telemetry.Metrics, id string, err error) error {
	if !errors.Is(err, bus.ErrPoison) {
		err = fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	m.DeadLetterDelivery(ctx, name)
	slog.ErrorContext(ctx, "undeliverable history event; it goes to the dead-letter topic", "messageId", id, "error", err.Error())
	return err
}
