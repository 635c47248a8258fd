// Package applycountersfn is the ApplyCounters event function. It consumes
// counter-events: batches of counter deltas from reactions, comments and
// reconciliation, each event applied idempotently by counterstore.Apply.
// (Views are counted from history-events by ApplyViews, per batch.)
package applycountersfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterCloudEvent("ApplyCounters", host.NeedSpanner,
		func(ctx context.Context, c *host.Clients) (func(context.Context, event.Event) error, error) {
			store, err := Build(c)
			if err != nil {
				return nil, err
			}
			return New(store, c.Metrics), nil
		})
}

// Build returns the counter store of an instance.
func Build(c *host.Clients) (*counterstore.Store, error) {
	mode, err := counterstore.ParseMode(c.Config.Counters.Mode)
	if err != nil {
		return nil, err
	}
	return counterstore.New(spannerdb.Wrap(c.Spanner, c.Config), counterstore.Options{
		Mode:           mode,
		Policy:         counter.ShardPolicy{WritesPerShard: c.Config.Counters.ShardWritesPerSecond, MinWindow: counter.DefaultShardPolicy.MinWindow},
		RollupInterval: c.Config.Counters.RollupInterval,
	}), nil
}

// Store applies events.
type Store interface {
	Apply(ctx context.Context, evs []events.Event) (counterstore.ApplyStats, error)
}

// New returns the event function. It returns an error when a retry is
// wanted (Spanner failed): Pub/Sub redelivers and the idempotent apply makes
// the retry safe. A message that can never be applied is logged and refused
// too, so that Pub/Sub moves it to the dead-letter topic after the
// configured attempts (kept there for inspection, never silently dropped);
// other messages are not held up behind it. m may be nil.
func New(store Store, m *telemetry.Metrics) func(context.Context, event.Event) error {
	// One message at a time per instance: functions-framework's CloudEvent
	// path mis-pairs concurrent requests, and batching happens upstream.
	var mu sync.Mutex
	consume := bus.Consume(name, m, func(ctx context.Context, msg bus.Message) error {
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
	return func(ctx context.Context, e event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		return consume(ctx, e)
	}
}

// Decode turns a counter message into its events; anything else (a
// watch of history-events included: ApplyViews counts those) is invalid.
func Decode(data []byte) ([]events.Event, error) {
	m, isMessage, err := events.DecodeIfMessage(data)
	if !isMessage {
		return nil, fmt.Errorf("%w: not a counter message", events.ErrInvalid)
	}
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
