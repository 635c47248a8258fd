package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/counter"
)

func sample() Message {
	return Message{V: Version, Events: []Event{
		{ID: ID("r", "u", "c", "1", "1"), Kind: KindReactionChanged, Outbox: true,
			Deltas:   []counter.Delta{{Key: "c", Field: counter.Likes, N: 1}},
			Time:     time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
			Reaction: &ReactionChange{UserID: "u", ContentID: "c", From: "none", To: "like", Version: 1}},
		{ID: "c-1", Kind: KindCounterDelta, Deltas: []counter.Delta{{Key: "v", Field: counter.Comments, N: 1}, {Key: "p", Field: counter.Replies, N: 1}}},
	}}
}

func TestRoundTrip(t *testing.T) {
	b, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sample(), got); diff != "" {
		t.Fatal(diff)
	}
}

func TestDecodeRejects(t *testing.T) {
	bad := map[string]string{
		"not json":        `{`,
		"future version":  `{"v":2,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}]}]}`,
		"no events":       `{"v":1,"events":[]}`,
		"unknown kind":    `{"v":1,"events":[{"id":"a","kind":"x","deltas":[{"key":"k","field":"likes","n":1}]}]}`,
		"empty id":        `{"v":1,"events":[{"id":"","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}]}]}`,
		"bad field":       `{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"shares","n":1}]}]}`,
		"bad key":         `{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k/1","field":"likes","n":1}]}]}`,
		"zero delta":      `{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":0}]}]}`,
		"no deltas":       `{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[]}]}`,
		"reaction absent": `{"v":1,"events":[{"id":"a","kind":"reactionChanged","outbox":true,"deltas":[]}]}`,
		"id too long":     `{"v":1,"events":[{"id":"` + strings.Repeat("a", 65) + `","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}]}]}`,
	}
	for name, s := range bad {
		if _, err := Decode([]byte(s)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Decode([]byte(`{"eventId":"watch-1","videoId":"v"}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a history event: got %v, want ErrInvalid", err)
	}
}

func TestID(t *testing.T) {
	if ID("r", "a", "bc") == ID("r", "ab", "c") {
		t.Error("length prefixes missing: ids collide")
	}
	if ID("r", "a") != ID("r", "a") || ID("r", "a") == ID("c", "a") {
		t.Error("ids not deterministic or prefix ignored")
	}
	if n := len(ID("r", strings.Repeat("x", 1000))); n > MaxEventIDLen {
		t.Errorf("id of %d bytes", n)
	}
}

type fakePublisher struct {
	msgs [][]byte
	fail error
}

func (f *fakePublisher) Publish(_ context.Context, data []byte, attrs map[string]string) (string, error) {
	if f.fail != nil {
		return "", f.fail
	}
	if attrs[AttrSchema] != SchemaValue || attrs[AttrKind] != KindValue {
		return "", errors.New("kind or schema attribute missing")
	}
	f.msgs = append(f.msgs, data)
	return "id", nil
}

func TestPublishAllSplitsAtMaxEvents(t *testing.T) {
	var evs []Event
	for i := 0; i < MaxEvents+1; i++ {
		evs = append(evs, Event{ID: ID("t", string(rune('a'+i%26)), strings.Repeat("x", i)), Kind: KindCounterDelta,
			Deltas: []counter.Delta{{Key: "k", Field: counter.Views, N: 1}}})
	}
	p := &fakePublisher{}
	if err := PublishAll(context.Background(), p, evs); err != nil {
		t.Fatal(err)
	}
	if len(p.msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(p.msgs))
	}
	published := 0
	for _, b := range p.msgs {
		m, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		published += len(m.Events)
	}
	if published != len(evs) {
		t.Errorf("%d events published, want %d", published, len(evs))
	}
	p.fail = errors.New("down")
	if err := Publish(context.Background(), p, evs[:1]); err == nil {
		t.Error("publish failure swallowed")
	}
}

// BenchmarkDecodeHotMessage reads a hot item's message of 32 reactions
// directly (Decode) and with encoding/json, side by side.
func BenchmarkDecodeHotMessage(b *testing.B) {
	evs := make([]Event, 32)
	for i := range evs {
		evs[i] = Event{
			ID: fmt.Sprintf("0123456789abcdef~r-%032x", i), Kind: KindReactionChanged, Outbox: true,
			Deltas: []counter.Delta{{Key: "hot", Field: counter.Likes, N: 1}}, Time: time.Date(2026, 12, 1, 2, 30, 0, 123456789, time.UTC),
			Reaction: &ReactionChange{UserID: fmt.Sprintf("user-%d", i), ContentID: "hot", From: "none", To: "like", Version: 1},
		}
	}
	data, err := Encode(Message{Events: evs})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m Message
			if err := json.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
			if err := m.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
