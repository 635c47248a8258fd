package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/go-cmp/cmp"
)

func cloudEvent(_ testing.TB, id string, data []byte) event.Event { return PushCloudEvent(id, data) }

// FuzzFromCloudEvent: whatever a push carries, FromCloudEvent never panics
// and refuses only with ErrPoison (never a retry); what it accepts names a
// message id (the push's, else the event's), carries the push's bytes, and
// comes out the same when pushed again.
// Seeds: the f.Add calls and testdata/fuzz/FuzzFromCloudEvent. Run longer with:
//
//	go test -run '^$' -fuzz '^FuzzFromCloudEvent$' -fuzztime 60s ./shared/bus/
func FuzzFromCloudEvent(f *testing.F) {
	for _, s := range []string{
		`{"message":{"data":"eyJ2IjoxfQ==","attributes":{"schema":"counter-events/v1"},"messageId":"42","publishTime":"2026-01-02T03:04:05.678Z"},"subscription":"projects/p/subscriptions/s"}`,
		`{"message":{"data":"","messageId":""}}`,
		`{"message":{"data":"not base64!"}}`,
		`{"message":{"data":"eyJ2IjoxfQ"}}`,
		`{"message":{"publishTime":"yesterday"}}`,
		`{"message":{"attributes":{"a":1}}}`,
		`{"message":null}`, `{}`, `null`, `[]`, `"x"`, ``, `{"message":{"messageId":"1","messageId":"2"}}`,
	} {
		f.Add("e1", []byte(s))
	}
	f.Add("", []byte(`{"message":{"data":"AA=="}}`))
	f.Fuzz(func(t *testing.T, id string, data []byte) {
		// Event ids (Pub/Sub message ids, in decimal) are never empty and
		// always text.
		id = strings.ToValidUTF8(id, "?")
		if id == "" {
			id = "e"
		}
		e := cloudEvent(t, id, data)
		m, err := FromCloudEvent(e)
		if err != nil {
			if !errors.Is(err, ErrPoison) {
				t.Fatalf("FromCloudEvent(%q) = %v, not ErrPoison", data, err)
			}
			return
		}
		var raw struct {
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		}
		_ = json.Unmarshal(data, &raw)
		switch {
		case raw.Message.MessageID != "" && m.ID != raw.Message.MessageID:
			t.Fatalf("FromCloudEvent(%q).ID = %q, want the push's %q", data, m.ID, raw.Message.MessageID)
		case raw.Message.MessageID == "" && m.ID != e.ID():
			t.Fatalf("FromCloudEvent(%q).ID = %q, want the event's %q", data, m.ID, e.ID())
		}
		// Push it again: the same message.
		var again pushData
		again.Message.Data = m.Data
		again.Message.Attributes = m.Attributes
		again.Message.MessageID = m.ID
		again.Message.PublishTime = m.PublishTime
		b, err := json.Marshal(again)
		if err != nil {
			if m.PublishTime.Year() < 0 || m.PublishTime.Year() > 9999 {
				return // not a time Pub/Sub sends; json cannot write it
			}
			t.Fatalf("re-encoding %+v: %v", m, err)
		}
		m2, err := FromCloudEvent(cloudEvent(t, id, b))
		if err != nil {
			t.Fatalf("FromCloudEvent refuses the re-pushed %s: %v", b, err)
		}
		if diff := cmp.Diff(m, m2, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
			cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })); diff != "" {
			t.Fatalf("re-push of %q changed the message (-first +second):\n%s", data, diff)
		}
	})
}
