package applycountersfn

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// hotMessage is a counter message as a hot item's group commit publishes
// it: n reactions of n users on one item, in one outbox batch.
func hotMessage(b testing.TB, n int) []byte {
	b.Helper()
	evs := make([]events.Event, n)
	at := time.Date(2026, 12, 1, 2, 30, 0, 123456789, time.UTC)
	for i := range evs {
		evs[i] = events.Event{
			ID: fmt.Sprintf("b-0123456789abcdef-rc-%032x", i), Kind: events.KindReactionChanged, Outbox: true,
			Deltas: []counter.Delta{{Key: "hot", Field: counter.Likes, N: 1}}, Time: at,
			Reaction: &events.ReactionChange{UserID: fmt.Sprintf("user-%d", i), ContentID: "hot", From: "none", To: "like", Version: 1},
		}
	}
	data, err := events.Encode(events.Message{Events: evs})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkConsumeHotMessage is the work ApplyCounters does per message of
// a hot item's 32 reactions, the store left out: the Pub/Sub push request,
// the message in it, the events, and the answer.
func BenchmarkConsumeHotMessage(b *testing.B) {
	body := bus.PushBody(bus.Message{ID: "m1", Data: hotMessage(b, 32), Attributes: map[string]string{events.AttrKind: events.KindValue, events.AttrSchema: events.SchemaValue}}, "counter-apply")
	fn := New(discard{}, nil)
	b.ReportAllocs()
	for b.Loop() {
		if got := pushtest.DeliverBody(b, fn, body); got != pushtest.Acked {
			b.Fatal(got)
		}
	}
}

type discard struct{}

func (discard) Apply(_ context.Context, evs []events.Event) (counter.ApplyStats, error) {
	return counter.ApplyStats{Applied: len(evs)}, nil
}
