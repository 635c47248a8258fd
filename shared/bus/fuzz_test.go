package bus

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// A push as Pub/Sub sends it decodes whole; a body that is not a push is
// refused with ErrPoison and a reason.
func TestDecodePush(t *testing.T) {
	m, sub, err := DecodePush([]byte(`{"message":{"data":"eyJ2IjoxfQ==","attributes":{"kind":"counters"},` +
		`"messageId":"42","message_id":"42","publishTime":"2026-01-02T03:04:05.678Z","publish_time":"2026-01-02T03:04:05.678Z"},` +
		`"subscription":"projects/p/subscriptions/counter-apply","deliveryAttempt":3}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Message{ID: "42", Data: []byte(`{"v":1}`), Attributes: map[string]string{"kind": "counters"},
		PublishTime: time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC), DeliveryAttempt: 3}
	if diff := cmp.Diff(want, m); diff != "" || sub != "counter-apply" {
		t.Fatalf("DecodePush: subscription %q, message (-want +got):\n%s", sub, diff)
	}
	for body, reason := range map[string]string{
		``:                                 "not a Pub/Sub push body",
		`null`:                             "no message object",
		`{}`:                               "no message object",
		`{"message":null}`:                 "no message object",
		`{"message":{"data":"e30="}}`:      "no messageId",
		`{"message":{"messageId":"1"}} {}`: "data after the JSON object",
		`{"message":{"messageId":"1","data":"%"}}`: "illegal base64",
		`{"message":{"messageId":1}}`:              "cannot unmarshal number",
		`[{"message":{"messageId":"1"}}]`:          "cannot unmarshal array",
		`{"v":1,"events":[]}`:                      "no message object", // a message's data, not a push
	} {
		_, _, err := DecodePush([]byte(body))
		if !errors.Is(err, ErrPoison) || !strings.Contains(err.Error(), reason) {
			t.Errorf("DecodePush(%q) = %v, want ErrPoison saying %q", body, err, reason)
		}
	}
}

// FuzzDecodePush: whatever a push carries, DecodePush never panics and
// refuses only with ErrPoison (never a retry); what it accepts names the
// push's message id, carries the push's bytes, and comes out the same when
// pushed again (PushBody).
// Seeds: the f.Add calls and testdata/fuzz/FuzzDecodePush. Run longer with:
//
//	go test -run '^$' -fuzz '^FuzzDecodePush$' -fuzztime 60s ./shared/bus/
func FuzzDecodePush(f *testing.F) {
	for _, s := range []string{
		`{"message":{"data":"eyJ2IjoxfQ==","attributes":{"schema":"counter-events/v1"},"messageId":"42","publishTime":"2026-01-02T03:04:05.678Z"},"subscription":"projects/p/subscriptions/s"}`,
		`{"message":{"data":"","messageId":""}}`,
		`{"message":{"data":"not base64!"}}`,
		`{"message":{"data":"eyJ2IjoxfQ"}}`,
		`{"message":{"publishTime":"yesterday"}}`,
		`{"message":{"attributes":{"a":1}}}`,
		`{"message":null}`, `{}`, `null`, `[]`, `"x"`, ``, `{"message":{"messageId":"1","messageId":"2"}}`,
		`{"message":{"data":"AA==","messageId":"7"},"deliveryAttempt":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, sub, err := DecodePush(body)
		if err != nil {
			if !errors.Is(err, ErrPoison) {
				t.Fatalf("DecodePush(%q) = %v, not ErrPoison", body, err)
			}
			return
		}
		var raw struct {
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		}
		_ = json.Unmarshal(body, &raw)
		if m.ID == "" || m.ID != raw.Message.MessageID {
			t.Fatalf("DecodePush(%q).ID = %q, want the push's %q", body, m.ID, raw.Message.MessageID)
		}
		if m.PublishTime.Year() < 0 || m.PublishTime.Year() > 9999 {
			return // not a time Pub/Sub sends; json cannot write it
		}
		// Push it again: the same message.
		m2, sub2, err := DecodePush(PushBody(m, sub))
		if err != nil {
			t.Fatalf("DecodePush refuses the re-pushed %+v: %v", m, err)
		}
		if m.PublishTime.IsZero() {
			m2.PublishTime = m.PublishTime // PushBody stamps a zero time now
		}
		if sub2 != sub {
			t.Fatalf("re-push of %q changed the subscription: %q, then %q", body, sub, sub2)
		}
		if diff := cmp.Diff(m, m2, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Fatalf("re-push of %q changed the message (-first +second):\n%s", body, diff)
		}
	})
}
