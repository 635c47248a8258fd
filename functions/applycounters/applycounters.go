// Package applycountersfn is the ApplyCounters event function. It consumes
// counter-events: batches of counter deltas from reactions, comments and
// reconciliation, each event applied idempotently by outboxstore.Store.Apply.
// (Views are counted from history-events by ApplyViews, per batch.)
package applycountersfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterPush("ApplyCounters", host.NeedSpanner,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			store, err := Build(c)
			if err != nil {
				return nil, err
			}
			return New(store, c.Metrics), nil
		})
}

// Build returns the counters' consumer of an instance.
func Build(c *host.Clients) (*outboxstore.Store, error) {
	return outboxstore.New(spannerdb.Wrap(c.Spanner, c.Config)), nil
}

// Store applies events.
type Store interface {
	Apply(ctx context.Context, evs []events.Event) (counter.ApplyStats, error)
}

// New returns the event function's push handler (host.Push). It asks for a
// redelivery when Spanner failed: the apply is idempotent per event id, so
// the retry is safe, also when it overlaps another delivery of the same
// message. A message that can never be applied is logged and refused, so
// that Pub/Sub moves it to the dead-letter topic after the configured
// attempts (kept there for inspection, never silently dropped); other
// messages are not held up behind it. m may be nil.
func New(store Store, m *telemetry.Metrics) http.Handler {
	return host.Push(name, m, func(ctx context.Context, msg bus.Message) error {
		if err := CounterMessage(msg.Attributes); err != nil {
			return poisoned(err)
		}
		evs, err := Decode(msg.Data)
		if err != nil {
			return poisoned(err)
		}
		m.BatchSize(ctx, name, len(evs))
		st, err := store.Apply(ctx, evs)
		if err != nil {
			slog.WarnContext(ctx, "applycounters: apply failed; Pub/Sub will redeliver", "messageId", msg.ID, "error", err.Error())
			return fmt.Errorf("applycounters: message %s: %w", msg.ID, err)
		}
		m.EventsApplied(ctx, name, st.Applied)
		m.EventsDuplicate(ctx, name, st.Duplicates)
		slog.DebugContext(ctx, "applycounters: applied", "messageId", msg.ID, "events", len(evs),
			"applied", st.Applied, "duplicates", st.Duplicates, "counters", st.Counters)
		return nil
	})
}

// CounterMessage says, from a message's kind attribute, whether it is a
// counter message: another topic's message (a watch, an erasure) routed
// here is refused without reading its data. A message without the
// attribute is one published before it was set, and is read as one.
func CounterMessage(attrs map[string]string) error {
	if k, ok := attrs[events.AttrKind]; ok && k != events.KindValue {
		return fmt.Errorf("%w: a %q message, not a counter message", events.ErrInvalid, k)
	}
	return nil
}

// Decode turns a counter message's data into its events; errors wrap
// events.ErrInvalid.
func Decode(data []byte) ([]events.Event, error) {
	m, err := events.Decode(data)
	if err != nil {
		return nil, err
	}
	return m.Events, nil
}

const name = "ApplyCounters"

// poisoned marks err as a message that can never be applied.
func poisoned(err error) error {
	if errors.Is(err, bus.ErrPoison) {
		return err
	}
	return fmt.Errorf("%w: %w", bus.ErrPoison, err)
}
