package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/bus"
)

// Each answer is the acknowledgement Pub/Sub reads: applied, a backend's
// failure (redelivered), or poison, from the body or from apply (refused,
// so that it is dead-lettered).
func TestPushAnswers(t *testing.T) {
	var got []bus.Message
	h := host.Push("Test", nil, func(_ context.Context, m bus.Message) error {
		got = append(got, m)
		switch string(m.Data) {
		case "poison":
			return fmt.Errorf("%w: not a message of ours", bus.ErrPoison)
		case "down":
			return errors.New("spanner: unavailable")
		}
		return nil
	})
	msg := func(data string) []byte {
		return bus.PushBody(bus.Message{ID: "m-" + data, Data: []byte(data), Attributes: map[string]string{"kind": "test"}, DeliveryAttempt: 2}, "test-sub")
	}
	for _, tc := range []struct {
		name string
		body []byte
		want pushtest.Outcome
	}{
		{"applied", msg("ok"), pushtest.Acked},
		{"a backend failed", msg("down"), pushtest.Retried},
		{"poison", msg("poison"), pushtest.Refused},
		{"not JSON", []byte("not json"), pushtest.Refused},
		{"no message", []byte(`{"subscription":"projects/p/subscriptions/s"}`), pushtest.Refused},
		{"no message id", []byte(`{"message":{"data":"b2s="}}`), pushtest.Refused},
		{"the unwrapped format (no_wrapper)", []byte("ok"), pushtest.Refused},
	} {
		if o := pushtest.DeliverBody(t, h, tc.body); o != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, o, tc.want)
		}
	}
	if len(got) != 3 || got[0].ID != "m-ok" || got[0].Attributes["kind"] != "test" || got[0].DeliveryAttempt != 2 {
		t.Errorf("apply got %+v; want the three well-formed pushes, decoded", got)
	}

	// The refusal says why, in the API's error body.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"message":{"data":"b2s="}}`)))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "no messageId") {
		t.Errorf("a push without an id: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(make([]byte, 17<<20))))
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 17 MiB body: %d, want 413", rec.Code)
	}
}

// One handler serves many pushes at once: none waits for another.
func TestPushServesConcurrently(t *testing.T) {
	const n = 8
	var mu sync.Mutex
	in, peak := 0, 0
	all := make(chan struct{})
	h := host.Push("Test", nil, func(ctx context.Context, _ bus.Message) error {
		mu.Lock()
		in++
		peak = max(peak, in)
		if in == n {
			close(all)
		}
		mu.Unlock()
		defer func() { mu.Lock(); in--; mu.Unlock() }()
		select {
		case <-all: // every push is in apply at the same time
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the other pushes never arrived")
		}
	})
	var wg sync.WaitGroup
	outcomes := make([]pushtest.Outcome, n)
	for i := range n {
		wg.Go(func() { outcomes[i] = pushtest.Deliver(t, h, bus.Message{ID: fmt.Sprint(i), Data: []byte("x")}, "s") })
	}
	wg.Wait()
	for i, o := range outcomes {
		if o != pushtest.Acked {
			t.Errorf("push %d: %v (peak %d in flight)", i, o, peak)
		}
	}
}
