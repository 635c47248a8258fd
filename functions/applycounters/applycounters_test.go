package applycountersfn

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
)

type fakeStore struct {
	got [][]events.Event
	err error
}

func (f *fakeStore) Apply(_ context.Context, evs []events.Event) (counter.ApplyStats, error) {
	f.got = append(f.got, evs)
	return counter.ApplyStats{Applied: len(evs)}, f.err
}

// push delivers a message of data to h and returns what Pub/Sub does with it.
func push(t *testing.T, h http.Handler, data []byte) pushtest.Outcome {
	t.Helper()
	return pushWith(t, h, data, nil)
}

// oneComment is a counter message of one event: a comment on v.
func oneComment(t *testing.T) []byte {
	t.Helper()
	msg, err := events.Encode(events.Message{Events: []events.Event{{ID: "c1", Kind: events.KindCounterDelta,
		Deltas: []counter.Delta{{Key: "v", Field: counter.Comments, N: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func pushWith(t *testing.T, h http.Handler, data []byte, attrs map[string]string) pushtest.Outcome {
	t.Helper()
	return pushtest.Deliver(t, h, bus.Message{ID: "m1", Data: data, Attributes: attrs}, "counter-apply")
}

// Messages are told apart by their kind attribute, not by their data: a
// valid counter message marked as another kind is refused unread; one
// marked as counters, or published before the attribute was set, is
// applied.
func TestKindAttribute(t *testing.T) {
	s := &fakeStore{}
	fn := New(s, nil)
	msg := oneComment(t)
	for _, kind := range []string{"watches", "account-erasure", ""} {
		if got := pushWith(t, fn, msg, map[string]string{events.AttrKind: kind}); got != pushtest.Refused {
			t.Errorf("kind %q: %v, want refused as poison", kind, got)
		}
	}
	if len(s.got) != 0 {
		t.Fatalf("applied messages of another kind: %+v", s.got)
	}
	for _, attrs := range []map[string]string{{events.AttrKind: events.KindValue, events.AttrSchema: events.SchemaValue}, nil} {
		if got := pushWith(t, fn, msg, attrs); got != pushtest.Acked {
			t.Errorf("attributes %v: %v", attrs, got)
		}
	}
	if len(s.got) != 2 {
		t.Fatalf("applied %d messages, want 2", len(s.got))
	}
}

// A counter message is applied; a watch (history-events, which ApplyViews
// counts per batch) is no counter message: refused, never counted here.
func TestCounterMessagesOnly(t *testing.T) {
	s := &fakeStore{}
	fn := New(s, nil)
	msg := oneComment(t)
	if got := push(t, fn, msg); got != pushtest.Acked {
		t.Fatal(got)
	}
	wb, _ := history.NewWatch("u", "vid", time.Now().Add(-time.Hour), 3).Encode()
	if got := push(t, fn, wb); got != pushtest.Refused {
		t.Errorf("a watch: %v, want refused as poison", got)
	}
	if len(s.got) != 1 || len(s.got[0]) != 1 || s.got[0][0].ID != "c1" {
		t.Fatalf("applied %+v, want the counter message alone", s.got)
	}
}

func TestPoisonIsRefusedForTheDeadLetterTopicAndFailuresRetried(t *testing.T) {
	s := &fakeStore{}
	fn := New(s, nil)
	for _, data := range []string{`not json`, `{"v":1,"events":[]}`, `{"eventId":"x","videoId":"v"}`} {
		if got := push(t, fn, []byte(data)); got != pushtest.Refused {
			t.Errorf("poison %q: %v, want refused as poison (dead-lettered after the attempts)", data, got)
		}
	}
	if len(s.got) != 0 {
		t.Fatalf("poison applied: %+v", s.got)
	}
	s.err = errors.New("spanner down")
	msg := oneComment(t)
	if got := push(t, fn, msg); got != pushtest.Retried {
		t.Fatalf("a store failure: %v, want redelivered", got)
	}
}
