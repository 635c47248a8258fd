package history

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeWatchAcceptsEncode(t *testing.T) {
	for _, w := range []Watch{
		NewWatch("alice", "v", time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC), 0),
		NewWatch("a#b", strings.Repeat("Z", 64), time.UnixMilli(1), MaxPositionSeconds),
		NewWatch(strings.Repeat("日", 42), "a-_0", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 12.75),
		NewWatch(strings.Repeat("x", MaxUserIDLength), "v", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 1),
	} {
		b, err := w.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", w, err)
		}
		got, err := DecodeWatch(b)
		if err != nil {
			t.Fatalf("DecodeWatch(%s): %v", b, err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("DecodeWatch(Encode(w)) (-want +got):\n%s", diff)
		}
	}
}

func TestDecodeWatchNormalizesTheTime(t *testing.T) {
	// A watch sent with sub-millisecond precision or another zone is the
	// same watch as its millisecond in UTC: same event id, same row key.
	at := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	want := NewWatch("alice", "v", at, 3)
	want.RecordedAt = time.Time{} // an event that does not say
	raw := map[string]any{
		"eventId":         want.EventID,
		"userId":          "alice",
		"videoId":         "v",
		"watchedAt":       "2026-03-04T07:06:07.008765432+02:00",
		"positionSeconds": 3,
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeWatch(b)
	if err != nil {
		t.Fatalf("DecodeWatch(%s): %v", b, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeWatch (-want +got):\n%s", diff)
	}
}

func TestDecodeWatchRejects(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	good := NewWatch("alice", "v", at, 10)
	// modified is the good watch as JSON with some fields replaced (nil
	// removes a field).
	modified := func(change map[string]any) []byte {
		b, err := good.Encode()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range change {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		if b, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// reid is the good watch with fields replaced and the event id made to
	// match, so that only the replaced field is wrong.
	reid := func(user, video string, at time.Time, change map[string]any) []byte {
		change["eventId"] = WatchEventID(user, video, at)
		return modified(change)
	}
	tests := map[string][]byte{
		"not JSON":                  []byte("watch"),
		"empty":                     nil,
		"JSON array":                []byte(`[]`),
		"JSON null":                 []byte(`null`),
		"JSON string":               []byte(`"x"`),
		"wrong types":               modified(map[string]any{"positionSeconds": "10"}),
		"bad time":                  modified(map[string]any{"watchedAt": "yesterday"}),
		"no user":                   reid("", "v", at, map[string]any{"userId": nil}),
		"empty user":                reid("", "v", at, map[string]any{"userId": ""}),
		"user too long":             reid(strings.Repeat("x", MaxUserIDLength+1), "v", at, map[string]any{"userId": strings.Repeat("x", MaxUserIDLength+1)}),
		"no video":                  reid("alice", "", at, map[string]any{"videoId": nil}),
		"video with slash":          reid("alice", "a/b", at, map[string]any{"videoId": "a/b"}),
		"video with hash":           reid("alice", "a#b", at, map[string]any{"videoId": "a#b"}),
		"video with space":          reid("alice", "a b", at, map[string]any{"videoId": "a b"}),
		"video not ASCII":           reid("alice", "é", at, map[string]any{"videoId": "é"}),
		"video too long":            reid("alice", strings.Repeat("v", 65), at, map[string]any{"videoId": strings.Repeat("v", 65)}),
		"no time":                   reid("alice", "v", time.Time{}, map[string]any{"watchedAt": nil}),
		"zero time":                 reid("alice", "v", time.Time{}, map[string]any{"watchedAt": time.Time{}}),
		"time at the epoch":         reid("alice", "v", time.Unix(0, 0), map[string]any{"watchedAt": time.Unix(0, 0).UTC()}),
		"time before the epoch":     reid("alice", "v", time.Unix(-1, 0), map[string]any{"watchedAt": time.Unix(-1, 0).UTC()}),
		"no event id":               modified(map[string]any{"eventId": nil}),
		"empty event id":            modified(map[string]any{"eventId": ""}),
		"event id of another user":  modified(map[string]any{"eventId": WatchEventID("bob", "v", at)}),
		"event id of another video": modified(map[string]any{"eventId": WatchEventID("alice", "w", at)}),
		"event id of another time":  modified(map[string]any{"eventId": WatchEventID("alice", "v", at.Add(time.Millisecond))}),
		"user changed":              modified(map[string]any{"userId": "bob"}),
		"video changed":             modified(map[string]any{"videoId": "w"}),
		"time changed":              modified(map[string]any{"watchedAt": at.Add(time.Second)}),
		"negative position":         modified(map[string]any{"positionSeconds": -1}),
		"tiny negative position":    modified(map[string]any{"positionSeconds": -1e-9}),
		"position too large":        modified(map[string]any{"positionSeconds": MaxPositionSeconds + 1}),
		"position huge":             modified(map[string]any{"positionSeconds": 1e308}),
		"NaN position":              []byte(strings.Replace(string(modified(nil)), `"positionSeconds":10`, `"positionSeconds":NaN`, 1)),
	}
	for name, b := range tests {
		if w, err := DecodeWatch(b); err == nil {
			t.Errorf("%s: DecodeWatch(%s) = %+v; want an error", name, b, w)
		}
	}
}

func TestValidPosition(t *testing.T) {
	for p, want := range map[float64]bool{
		0:                            true,
		0.5:                          true,
		3600:                         true,
		MaxPositionSeconds:           true,
		MaxPositionSeconds + 1:       false,
		-1:                           false,
		math.Copysign(0, -1):         true, // -0 is 0
		math.NaN():                   false,
		math.Inf(1):                  false,
		math.Inf(-1):                 false,
		-math.SmallestNonzeroFloat64: false,
	} {
		if got := ValidPosition(p); got != want {
			t.Errorf("ValidPosition(%v) = %v, want %v", p, got, want)
		}
	}
	// NaN is not a key of a map lookup; check it on its own.
	if ValidPosition(math.NaN()) {
		t.Errorf("ValidPosition(NaN) = true")
	}
	// Encode refuses what JSON cannot carry, so NaN never reaches the bus.
	if _, err := (Watch{PositionSeconds: math.NaN()}).Encode(); err == nil {
		t.Errorf("Encode of a NaN position succeeded")
	}
}

func TestValidAutoDeleteMonths(t *testing.T) {
	for m := -40; m <= 40; m++ {
		want := m == 0 || m == 3 || m == 18 || m == 36
		if got := ValidAutoDeleteMonths(m); got != want {
			t.Errorf("ValidAutoDeleteMonths(%d) = %v, want %v", m, got, want)
		}
	}
}

func TestSettingsHorizon(t *testing.T) {
	now := time.Date(2026, 7, 15, 10, 30, 0, 123_456_789, time.UTC)
	tests := []struct {
		name string
		s    Settings
		now  time.Time
		want time.Time
	}{
		{"keep", Settings{AutoDeleteMonths: 0}, now, time.Time{}},
		{"keep while paused", Settings{Paused: true}, now, time.Time{}},
		{"3 months", Settings{AutoDeleteMonths: 3}, now, time.Date(2026, 4, 15, 10, 30, 0, 123_456_789, time.UTC)},
		{"18 months", Settings{AutoDeleteMonths: 18}, now, time.Date(2025, 1, 15, 10, 30, 0, 123_456_789, time.UTC)},
		{"36 months", Settings{AutoDeleteMonths: 36}, now, time.Date(2023, 7, 15, 10, 30, 0, 123_456_789, time.UTC)},
		{"paused does not change it", Settings{Paused: true, AutoDeleteMonths: 3}, now, time.Date(2026, 4, 15, 10, 30, 0, 123_456_789, time.UTC)},
		{"other zone", Settings{AutoDeleteMonths: 3}, now.In(time.FixedZone("UTC-8", -8*3600)), time.Date(2026, 4, 15, 10, 30, 0, 123_456_789, time.UTC)},
		// Day overflow normalizes forward (31 May - 3 months = 31 Feb = 3 Mar).
		{"end of month", Settings{AutoDeleteMonths: 3}, time.Date(2026, 5, 31, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)},
		{"leap day", Settings{AutoDeleteMonths: 36}, time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tc := range tests {
		got := tc.s.Horizon(tc.now)
		if !got.Equal(tc.want) || (!got.IsZero() && got.Location() != time.UTC) {
			t.Errorf("%s: %+v.Horizon(%v) = %v, want %v", tc.name, tc.s, tc.now, got, tc.want)
		}
	}
}

func TestSettingsReadHorizon(t *testing.T) {
	now := time.Date(2026, 7, 15, 10, 30, 0, 0, time.UTC)
	day := 24 * time.Hour
	tests := []struct {
		name      string
		s         Settings
		retention time.Duration
		want      time.Time
	}{
		{"neither", Settings{}, 0, time.Time{}},
		{"retention only", Settings{}, 30 * day, now.Add(-30 * day)},
		{"horizon only", Settings{AutoDeleteMonths: 3}, 0, time.Date(2026, 4, 15, 10, 30, 0, 0, time.UTC)},
		{"horizon later", Settings{AutoDeleteMonths: 3}, 1096 * day, time.Date(2026, 4, 15, 10, 30, 0, 0, time.UTC)},
		{"retention later", Settings{AutoDeleteMonths: 36}, 30 * day, now.Add(-30 * day)},
	}
	for _, tc := range tests {
		got := tc.s.ReadHorizon(now.In(time.FixedZone("UTC+2", 7200)), tc.retention)
		if !got.Equal(tc.want) || (!got.IsZero() && got.Location() != time.UTC) {
			t.Errorf("%s: ReadHorizon = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAutoDeleteChoices(t *testing.T) {
	for _, m := range AutoDeleteChoices() {
		if m == 0 || !ValidAutoDeleteMonths(m) {
			t.Errorf("choice %d is not a valid horizon", m)
		}
	}
	if got := AutoDeleteChoices(); len(got) != 3 {
		t.Errorf("AutoDeleteChoices() = %v, want the 3 offered horizons", got)
	}
	c := AutoDeleteChoices()
	c[0] = 5
	if ValidAutoDeleteMonths(5) {
		t.Error("changing the returned slice changed the valid horizons")
	}
}

func TestSettingsJSON(t *testing.T) {
	b, err := json.Marshal(Settings{Paused: true, AutoDeleteMonths: 18})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"paused":true,"autoDeleteMonths":18}`; got != want {
		t.Errorf("settings JSON = %s, want %s", got, want)
	}
}
