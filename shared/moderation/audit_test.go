package moderation

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestProtected(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	const p = 30 * 24 * time.Hour
	for _, c := range []struct {
		name    string
		flagged bool
		updated time.Time
		want    bool
	}{
		{"flagged long ago", true, now.Add(-365 * 24 * time.Hour), true},
		{"flagged now", true, now, true},
		{"unflagged just now", false, now, true},
		{"unflagged a second short of the period", false, now.Add(-p + time.Second), true},
		{"unflagged exactly the period ago", false, now.Add(-p), false},
		{"unflagged long ago", false, now.Add(-2 * p), false},
	} {
		if got := Protected(c.flagged, c.updated, now, p); got != c.want {
			t.Errorf("%s: Protected = %v, want %v", c.name, got, c.want)
		}
	}
	// No protection: an unflag does not hold the detectors back.
	if Protected(false, now, now, 0) {
		t.Error("a zero protection protects")
	}
}

func TestValidReason(t *testing.T) {
	for _, ok := range []string{"", "spam ring", strings.Repeat("é", MaxReasonChars)} {
		if err := ValidReason(ok); err != nil {
			t.Errorf("%.20q: %v", ok, err)
		}
	}
	for _, bad := range []string{strings.Repeat("a", MaxReasonChars+1), "\xff"} {
		if err := ValidReason(bad); err == nil {
			t.Errorf("%.20q accepted", bad)
		}
	}
}

func TestEntryCursorRoundTrip(t *testing.T) {
	c := EntryCursor{Time: time.Date(2026, 12, 3, 1, 2, 3, 456789, time.UTC), ID: "0a1b"}
	got, err := ParseEntryCursor(c.String())
	if err != nil || !got.Time.Equal(c.Time) || got.ID != c.ID {
		t.Fatalf("round trip: %+v %v, want %+v", got, err, c)
	}
	for _, bad := range []string{"", "x", "zz!.id", "12."} {
		if _, err := ParseEntryCursor(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestEntryJSON(t *testing.T) {
	e := Entry{ID: "e1", Time: time.Date(2026, 12, 3, 1, 0, 0, 0, time.FixedZone("x", 3600)), Action: ActionSpam,
		Actor: "mod", ActorKind: ActorModerator, UserID: "u", CommentID: "c", VideoID: "v", Changed: true}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"e1","time":"2026-12-03T00:00:00Z","action":"spam","actor":{"id":"mod","kind":"moderator"},"userId":"u","commentId":"c","videoId":"v","reason":"","changed":true}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
}
