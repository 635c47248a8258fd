package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/counter"
)

// FuzzDecode: Decode never panics; it refuses with ErrInvalid only; what it
// accepts is valid (ids, counter keys, fields, limits), re-encodes, and
// decodes again to the same value, whose encoding is a fixed point.
// Seeds: the f.Add calls and testdata/fuzz/FuzzDecode. Run longer with:
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 60s ./shared/events/
func FuzzDecode(f *testing.F) {
	if b, err := Encode(sample()); err == nil {
		f.Add(b)
	} else {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"views","n":-9223372036854775808}]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","outbox":true,"deltas":[]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"reactionChanged","outbox":true,"deltas":null,"reaction":{"userId":"u","contentId":"c","from":"none","to":"like","version":1}}]}`,
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}],"time":"2026-01-02T03:04:05.123456789+05:30"}]}`,
		`{"V":1,"EVENTS":[{"ID":"a","Kind":"counterDelta","Deltas":[{"Key":"k","Field":"likes","N":1}]}]}`,
		`{"v":1,"events":[{"id":"\ud800","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k\u0000","field":"likes","n":1}]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1.5}]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"Likes","n":1}]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}],"time":"0000-01-01T00:00:00+01:00"}]}`,
		`{"v":1.0,"events":[]}`, `{"v":1}`, `{"events":[]}`, `null`, `[]`, ``, `{"v":1,"events":{}}`,
		`{"eventId":"watch-1","userId":"u","videoId":"v","watchedAt":"2026-01-01T00:00:00Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode(%q) = %v, not ErrInvalid", data, err)
			}
			return
		}
		checkValid(t, data, m)
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode of the accepted %q: %v", data, err)
		}
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode refuses its own re-encoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("round trip of %q changed the message (-first +second):\n%s", data, diff)
		}
		enc2, err := Encode(m2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s (%v)", enc, enc2, err)
		}
	})
}

// checkValid restates the rules of a message without using Validate.
func checkValid(t *testing.T, data []byte, m Message) {
	t.Helper()
	if m.V != Version || len(m.Events) < 1 || len(m.Events) > MaxEvents {
		t.Fatalf("Decode(%q) accepted version %d with %d events", data, m.V, len(m.Events))
	}
	for _, e := range m.Events {
		if e.ID == "" || len(e.ID) > MaxEventIDLen || !utf8.ValidString(e.ID) {
			t.Fatalf("Decode(%q) accepted the event id %q", data, e.ID)
		}
		if e.Kind != KindCounterDelta && e.Kind != KindReactionChanged {
			t.Fatalf("Decode(%q) accepted the kind %q", data, e.Kind)
		}
		if len(e.Deltas) > MaxDeltas || len(e.Deltas) == 0 && !e.Outbox {
			t.Fatalf("Decode(%q) accepted %d deltas (outbox %v)", data, len(e.Deltas), e.Outbox)
		}
		for _, d := range e.Deltas {
			if !validKey(d.Key) || d.N == 0 {
				t.Fatalf("Decode(%q) accepted the delta %+v", data, d)
			}
			if _, err := counter.ParseField(string(d.Field)); err != nil {
				t.Fatalf("Decode(%q) accepted the field %q", data, d.Field)
			}
		}
		if e.Kind == KindReactionChanged {
			r := e.Reaction
			if r == nil || !validKey(r.ContentID) || r.UserID == "" || len(r.UserID) > MaxUserIDBytes || !utf8.ValidString(r.UserID) {
				t.Fatalf("Decode(%q) accepted the reaction %+v", data, r)
			}
		}
	}
}

// validKey is ^[A-Za-z0-9_-]{1,64}$, written out again.
func validKey(s string) bool {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !strings.ContainsRune(alphabet, rune(c)) {
			return false
		}
	}
	return true
}

// FuzzEventID: ids of different part lists never collide, and every id fits
// the event id limit, whatever the parts hold.
//
//	go test -run '^$' -fuzz '^FuzzEventID$' -fuzztime 60s ./shared/events/
func FuzzEventID(f *testing.F) {
	f.Add("r", "a", "bc", "ab", "c")
	f.Add("r", "1:a", "", "1", ":a")
	f.Add("cpost", "x", "y", "x", "y")
	f.Fuzz(func(t *testing.T, prefix, a1, a2, b1, b2 string) {
		if len(prefix) > 8 {
			prefix = prefix[:8] // producers use short constant prefixes
		}
		ida, idb := ID(prefix, a1, a2), ID(prefix, b1, b2)
		if (ida == idb) != (a1 == b1 && a2 == b2) {
			t.Fatalf("ID(%q, %q, %q) = %s and ID(%q, %q, %q) = %s", prefix, a1, a2, ida, prefix, b1, b2, idb)
		}
		if !utf8.ValidString(prefix) {
			return
		}
		if err := (Event{ID: ida, Kind: KindCounterDelta, Deltas: []counter.Delta{{Key: "k", Field: counter.Views, N: 1}}}).Validate(); err != nil {
			t.Fatalf("ID(%q, ...) = %q is not a valid event id: %v", prefix, ida, err)
		}
	})
}

// FuzzDecodeDirect: whatever the direct decoder accepts, encoding/json
// decodes to the same message, so Decode's answer never depends on
// which of them read it; and the form Encode writes is always read directly.
func FuzzDecodeDirect(f *testing.F) {
	enc, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	for _, s := range []string{
		`{"v":1,"events":[{"id":"a","kind":"counterDelta","deltas":[{"key":"k","field":"likes","n":1}]}]}`,
		`{"v":1,"events":[{"id":"a","kind":"reactionChanged","outbox":true,"deltas":[{"key":"k","field":"likes","n":-1},{"key":"k","field":"dislikes","n":1}],"time":"2026-12-01T02:30:00.123456789Z","reaction":{"userId":"u","contentId":"k","from":"like","to":"dislike","version":2}}]}`,
		` { "v" : 1 , "events" : [ ] } `, `{"v":1,"events":[],"v":1}`, `{"v":1,"events":[{"id":"a","ID":"b"}]}`,
		`{"v":-0,"events":[{"n":01}]}`, `{"v":1,"events":[{"time":"2026-13-01T00:00:00Z"}]}`, `{"v":1,"events":[{"outbox":truex}]}`,
		`{"v":9223372036854775808,"events":[]}`, `{"events":[]}`, `{"v":1}`, `{"v":1,"events":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		direct, ok := decodeDirect(b)
		if !ok {
			return
		}
		var ref Message
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("%q: read directly as %+v, but encoding/json refuses it: %v", b, direct, err)
		}
		if diff := cmp.Diff(ref, direct); diff != "" {
			t.Fatalf("%q: direct and encoding/json differ (-json +direct):\n%s", b, diff)
		}
	})
}

func TestEncodedFormReadDirectly(t *testing.T) {
	b, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	m, ok := decodeDirect(b)
	if !ok {
		t.Fatalf("%s: not read directly", b)
	}
	if diff := cmp.Diff(sample().Events, m.Events); diff != "" {
		t.Errorf("(-sample +direct):\n%s", diff)
	}
}

func TestDecodeDirectIntegers(t *testing.T) {
	for _, n := range []string{"0", "-0", "1", "-1", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "01", "-", "1.0", "1e3", "99999999999999999999"} {
		b := []byte(`{"v":1,"events":[{"deltas":[{"n":` + n + `}]}]}`)
		direct, ok := decodeDirect(b)
		var ref Message
		err := json.Unmarshal(b, &ref)
		if ok != (err == nil) {
			t.Errorf("n %s: direct ok %v, encoding/json error %v", n, ok, err)
		}
		if ok && direct.Events[0].Deltas[0].N != ref.Events[0].Deltas[0].N {
			t.Errorf("n %s: direct %d, encoding/json %d", n, direct.Events[0].Deltas[0].N, ref.Events[0].Deltas[0].N)
		}
	}
}
