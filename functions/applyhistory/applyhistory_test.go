package applyhistoryfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	applyhistoryfn "github.com/videngage/engagement/functions/applyhistory"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// countingStore counts the watches that reach the store.
type countingStore struct {
	*historystore.Store
	applied atomic.Int64
}

func (s *countingStore) Apply(ctx context.Context, w history.Watch) error {
	s.applied.Add(1)
	return s.Store.Apply(ctx, w)
}

func newStore(t *testing.T) (*countingStore, *host.Clients) {
	t.Helper()
	cfg := emulatortest.New(t)
	c, err := host.New(context.Background(), cfg, host.NeedBigtable)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &countingStore{Store: historystore.New(c.Bigtable)}, c
}

// pushBody is the body of a Pub/Sub push of a message to the function.
func pushBody(_ *testing.T, messageID string, data []byte, attrs map[string]string) []byte {
	return bus.PushBody(bus.Message{ID: messageID, Data: data, Attributes: attrs}, "history-apply")
}

func encode(t *testing.T, w history.Watch) []byte {
	t.Helper()
	b, err := w.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func list(t *testing.T, s *countingStore, user string) []history.Entry {
	t.Helper()
	p, err := s.List(t.Context(), user, nil, time.Time{}, 100)
	if err != nil {
		t.Fatalf("List(%q): %v", user, err)
	}
	return p.Entries
}

func recent() time.Time { return time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour) }

func TestApplyAWatch(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	fn := applyhistoryfn.New(s, nil)
	w := history.NewWatch("alice", "v1", recent(), 42.5)
	if got := pushtest.DeliverBody(t, fn, pushBody(t, "m1", encode(t, w), map[string]string{"kind": "watch", "eventId": w.EventID})); got != pushtest.Acked {
		t.Fatalf("ApplyHistory: %v", got)
	}
	want := []history.Entry{{VideoID: "v1", WatchedAt: w.WatchedAt, PositionSeconds: 42.5}}
	if diff := cmp.Diff(want, list(t, s, "alice")); diff != "" {
		t.Errorf("history after one event (-want +got):\n%s", diff)
	}
}

func TestDuplicateDeliveryIsIdempotent(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	fn := applyhistoryfn.New(s, nil)
	w := history.NewWatch("bob", "v1", recent(), 1)
	rewatch := history.NewWatch("bob", "v1", recent().Add(time.Minute), 2)
	pushes := [][]byte{
		pushBody(t, "m1", encode(t, w), nil),
		pushBody(t, "m1", encode(t, w), nil), // redelivered
		pushBody(t, "m2", encode(t, rewatch), nil),
		pushBody(t, "m3", encode(t, w), nil), // published twice by a retried request
		pushBody(t, "m1", encode(t, w), nil), // redelivered after the rewatch
		pushBody(t, "m2", encode(t, rewatch), nil),
	}
	for i, body := range pushes {
		if got := pushtest.DeliverBody(t, fn, body); got != pushtest.Acked {
			t.Fatalf("delivery %d: %v", i, got)
		}
	}
	want := []history.Entry{{VideoID: "v1", WatchedAt: rewatch.WatchedAt, PositionSeconds: 2}}
	if diff := cmp.Diff(want, list(t, s, "bob")); diff != "" {
		t.Errorf("history after duplicate deliveries (-want +got):\n%s", diff)
	}
}

func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	fn := applyhistoryfn.New(s, nil)
	good := history.NewWatch("carol", "v1", recent(), 1)
	// with is the good watch as JSON with some fields replaced.
	with := func(fields map[string]any) []byte {
		var m map[string]any
		if err := json.Unmarshal(encode(t, good), &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range fields {
			m[k] = v
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The bad video id comes with its matching event id: only the id is wrong.
	badVideo := with(map[string]any{"videoId": "no/slashes", "eventId": history.WatchEventID("carol", "no/slashes", good.WatchedAt)})
	tests := map[string][]byte{
		"push body not JSON":          []byte("not json"),
		"push without a message id":   []byte(`{"message":{"data":"e30="},"subscription":"projects/p/subscriptions/history-apply"}`),
		"message data not JSON":       pushBody(t, "p2", []byte("watch v1"), nil),
		"message data empty":          pushBody(t, "p3", nil, nil),
		"message data a JSON array":   pushBody(t, "p4", []byte("[]"), nil),
		"bad video id":                pushBody(t, "p5", badVideo, nil),
		"mismatched event id":         pushBody(t, "p6", with(map[string]any{"eventId": history.WatchEventID("carol", "v2", good.WatchedAt)}), nil),
		"user changed under event id": pushBody(t, "p7", with(map[string]any{"userId": "mallory"}), nil),
		"negative position":           pushBody(t, "p8", with(map[string]any{"positionSeconds": -1}), nil),
		"no user":                     pushBody(t, "p9", with(map[string]any{"userId": ""}), nil),
	}
	for name, body := range tests {
		if got := pushtest.DeliverBody(t, fn, body); got != pushtest.Refused {
			t.Errorf("%s: ApplyHistory %v; want refused as poison", name, got)
		}
	}
	if n := s.applied.Load(); n != 0 {
		t.Errorf("poison messages reached the store %d times", n)
	}
	for _, u := range []string{"carol", "mallory"} {
		if got := list(t, s, u); len(got) != 0 {
			t.Errorf("poison messages wrote history of %q: %+v", u, got)
		}
	}
}

func TestStoreFailureAsksForARetry(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	fn := applyhistoryfn.New(s, nil)
	c.Bigtable.Close() // Bigtable is down
	w := history.NewWatch("dan", "v1", recent(), 1)
	if got := pushtest.DeliverBody(t, fn, pushBody(t, "m1", encode(t, w), nil)); got != pushtest.Retried {
		t.Fatalf("ApplyHistory with Bigtable down: %v, want redelivered", got)
	}
	// The store says so: its failure is a backend's, not the message's.
	if err := s.Apply(t.Context(), w); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("store failure %v does not wrap ErrBackendUnavailable", err)
	}
}
