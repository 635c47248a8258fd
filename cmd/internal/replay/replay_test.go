package replay

import (
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
)

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	w1 := history.NewWatch("alice", "v1", t0.Add(-time.Hour), 0)
	w1.RecordedAt = t0.Add(time.Minute)
	w2 := history.NewWatch("bob", "v1", t0.Add(-2*time.Hour), 0)
	w2.RecordedAt = t0
	batch, err := history.Batch{ID: "wb-1", Watches: []history.Watch{w1, w2}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	counters := func(evs ...events.Event) []byte {
		b, err := events.Encode(events.Message{Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	like := func(id string, outbox bool, at time.Time) events.Event {
		return events.Event{ID: id, Kind: events.KindCounterDelta, Outbox: outbox, Time: at,
			Deltas: []counter.Delta{{Key: "v1", Field: counter.Likes, N: 1}}}
	}
	for _, tc := range []struct {
		name, topic string
		data        []byte
		accepted    time.Time
		poison      bool
	}{
		{"a history batch dates from its earliest acceptance", "history-events", batch, t0, false},
		{"undecodable history", "history-events", []byte("not json"), time.Time{}, true},
		{"counter events date from the earliest", "counter-events", counters(like("a", false, t0.Add(time.Hour)), like("b", false, t0)), t0, false},
		{"outbox events have no age that matters", "counter-events", counters(like("a", true, t0.Add(-30*24*time.Hour)), like("b", false, t0)), t0, false},
		{"only outbox events", "counter-events", counters(like("a", true, t0)), time.Time{}, false},
		{"undecodable counters", "counter-events", []byte{0xff}, time.Time{}, true},
		{"an erasure step is not judged here", "account-erasures", []byte(`{}`), time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.topic, tc.data)
			if (v.Poison != nil) != tc.poison {
				t.Fatalf("poison %v, want %v (%s)", v.Poison, tc.poison, v.What)
			}
			if !v.Accepted.Equal(tc.accepted) {
				t.Errorf("accepted %v, want %v (%s)", v.Accepted, tc.accepted, v.What)
			}
			if v.What == "" {
				t.Error("no description")
			}
		})
	}
}
