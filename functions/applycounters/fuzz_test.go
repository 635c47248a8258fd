package applycountersfn

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
)

// FuzzApplyCounters: whatever a message holds, the function never panics;
// it either hands the store valid events of a counter message (those Decode
// returns, the same for the same bytes) or refuses the message as poison
// without touching the store; a watch (history-events) is refused.
// Seeds: the f.Add calls and testdata/fuzz/FuzzApplyCounters. Run longer with:
//
//	go test -run '^$' -fuzz '^FuzzApplyCounters$' -fuzztime 60s ./functions/applycounters/
func FuzzApplyCounters(f *testing.F) {
	msg, err := events.Encode(events.Message{Events: []events.Event{
		{ID: "c1", Kind: events.KindCounterDelta, Deltas: []counter.Delta{{Key: "v", Field: counter.Comments, N: 1}}},
		{ID: events.ID("r", "u", "c", "1", "1"), Kind: events.KindReactionChanged, Outbox: true,
			Deltas:   []counter.Delta{{Key: "c", Field: counter.Likes, N: 1}},
			Reaction: &events.ReactionChange{UserID: "u", ContentID: "c", From: "none", To: "like", Version: 1}},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg)
	watch, err := history.NewWatch("alice", "vid", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 42.5).Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(watch)
	for _, s := range []string{
		`not json`, `{"v":1,"events":[]}`, `{"eventId":"x","videoId":"v"}`, `{}`, `null`, ``,
		`{"v":1,"eventId":"x"}`, `{"v":2,"events":[{}]}`,
		`{"eventId":"watch-0","userId":"u","videoId":"v/../w","watchedAt":"2026-01-01T00:00:00Z"}`,
		`{"eventId":"watch-0","userId":"u","videoId":"v","watchedAt":"1969-12-31T23:59:59Z"}`,
	} {
		f.Add([]byte(s))
	}
	// Poison is logged at ERROR: keep the fuzzer's output to its findings.
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	f.Cleanup(func() { slog.SetDefault(prev) })
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, decErr := Decode(data)
		if decErr != nil {
			if !errors.Is(decErr, events.ErrInvalid) {
				t.Fatalf("Decode(%q) = %v, not events.ErrInvalid", data, decErr)
			}
		} else {
			if err := (events.Message{V: events.Version, Events: evs}).Validate(); err != nil {
				t.Fatalf("Decode(%q) returned invalid events: %v", data, err)
			}
			if _, err := history.DecodeWatch(data); err == nil {
				t.Fatalf("Decode(%q) accepted a watch", data)
			}
		}

		s := &fakeStore{}
		got := push(t, New(s, nil), data)
		if decErr != nil {
			if got != pushtest.Refused || len(s.got) != 0 {
				t.Fatalf("undecodable %q: %v, store got %d batches; want poison and nothing applied", data, got, len(s.got))
			}
			return
		}
		if got != pushtest.Acked || len(s.got) != 1 {
			t.Fatalf("decodable %q: %v, store got %d batches", data, got, len(s.got))
		}
		if diff := cmp.Diff(evs, s.got[0]); diff != "" {
			t.Fatalf("store got other events than Decode gives (-decode +store):\n%s", diff)
		}
	})
}
