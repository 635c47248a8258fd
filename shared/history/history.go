// Package history holds the watch-history domain: the recorded watch event,
// the Bigtable row keys that make "newest first" one prefix scan, page tokens
// and the per-user settings. No I/O here.
package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"
)

// MaxFuture is how far in the future a watch may claim to be (clock skew).
const MaxFuture = 5 * time.Minute

// MaxUserIDLength bounds the user ids the keys are built from (token sub).
const MaxUserIDLength = 128

// Watch is one recorded watch: the event published on the history topic.
type Watch struct {
	EventID         string    `json:"eventId"`
	UserID          string    `json:"userId"`
	VideoID         string    `json:"videoId"`
	WatchedAt       time.Time `json:"watchedAt"`
	PositionSeconds float64   `json:"positionSeconds"`
	// RecordedAt is when the service accepted the watch. A deletion removes
	// the watches accepted before it, even those still in flight; one
	// recorded after it is history again, whatever its watch time.
	RecordedAt time.Time `json:"recordedAt,omitzero"`
}

// AcceptedAt is when the watch was accepted, or its watch time for an event
// that does not say.
func (w Watch) AcceptedAt() time.Time {
	if w.RecordedAt.IsZero() {
		return w.WatchedAt
	}
	return w.RecordedAt
}

// NewWatch builds the watch event. Times are kept to the millisecond, the
// resolution of Bigtable cell timestamps; the event id is deterministic in
// (user, video, watch time), so recording the same watch twice is one watch.
// It is recorded now.
func NewWatch(userID, videoID string, watchedAt time.Time, position float64) Watch {
	at := watchedAt.UTC().Truncate(time.Millisecond)
	return Watch{
		EventID:         WatchEventID(userID, videoID, at),
		UserID:          userID,
		VideoID:         videoID,
		WatchedAt:       at,
		PositionSeconds: position,
		RecordedAt:      time.Now().UTC(),
	}
}

// WatchEventID is the deterministic id of the watch (user, video, time).
func WatchEventID(userID, videoID string, at time.Time) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s|%s|%d", len(userID), userID, videoID, at.UnixMilli())
	return "watch-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Encode is the wire form of the event.
func (w Watch) Encode() ([]byte, error) { return json.Marshal(w) }

// DecodeWatch decodes and validates a watch event; an error means the
// message can never be applied (poison).
func DecodeWatch(b []byte) (Watch, error) {
	var w Watch
	if err := json.Unmarshal(b, &w); err != nil {
		return Watch{}, fmt.Errorf("history.DecodeWatch: %w", err)
	}
	if err := w.validate(); err != nil {
		return Watch{}, fmt.Errorf("history.DecodeWatch: %w", err)
	}
	// The event id names the watch's millisecond; keep the time to that
	// millisecond in UTC, as NewWatch does, so that the row keys (which
	// hold microseconds) of one watch are always the same.
	w.WatchedAt = w.WatchedAt.UTC().Truncate(time.Millisecond)
	return w, nil
}

func (w Watch) validate() error {
	switch {
	case w.UserID == "" || len(w.UserID) > MaxUserIDLength || !utf8.ValidString(w.UserID):
		return fmt.Errorf("bad user id")
	case !validVideoID(w.VideoID):
		return fmt.Errorf("bad video id %q", w.VideoID)
	case w.WatchedAt.IsZero() || w.WatchedAt.UnixMilli() <= 0:
		return fmt.Errorf("bad watch time")
	case w.EventID != WatchEventID(w.UserID, w.VideoID, w.WatchedAt):
		return fmt.Errorf("event id does not match the watch")
	case !ValidPosition(w.PositionSeconds):
		return fmt.Errorf("bad position")
	}
	return nil
}

// ValidPosition reports whether p is a plausible resume position.
func ValidPosition(p float64) bool {
	return !math.IsNaN(p) && p >= 0 && p <= MaxPositionSeconds
}

// MaxPositionSeconds bounds positionSeconds (a month of video).
const MaxPositionSeconds = 31 * 24 * 3600

func validVideoID(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Entry is one line of a user's history.
type Entry struct {
	VideoID         string    `json:"videoId"`
	WatchedAt       time.Time `json:"watchedAt"`
	PositionSeconds float64   `json:"positionSeconds"`
}

// Page is one page of a user's history.
type Page struct {
	Entries []Entry
	// Next is where the next page starts; nil on the last page.
	Next *Cursor
}

// Settings are a user's history settings.
type Settings struct {
	Paused           bool `json:"paused" firestore:"paused"`
	AutoDeleteMonths int  `json:"autoDeleteMonths" firestore:"autoDeleteMonths"`
	// Erasing is not a setting but kept beside them, in the document every
	// history write reads anyway: the account's erasure (DELETE /v1/me) is
	// under way, and history writes are refused until it is done.
	Erasing bool `json:"-" firestore:"erasing,omitempty"`
}

// autoDeleteChoices are the offered auto-delete horizons, in months.
var autoDeleteChoices = []int{3, 18, 36}

// AutoDeleteChoices are the offered auto-delete horizons, in months (0, no
// auto-delete, aside).
func AutoDeleteChoices() []int { return slices.Clone(autoDeleteChoices) }

// ValidAutoDeleteMonths reports whether m is an offered auto-delete horizon.
func ValidAutoDeleteMonths(m int) bool { return m == 0 || slices.Contains(autoDeleteChoices, m) }

// ReadHorizon is the oldest watch time a read shows: the later of the
// user's horizon and the table's retention (zero: none). Bigtable's garbage
// collection removes what is past the retention only eventually, and the
// auto-delete job what is past the user's horizon once a day, so a read
// hides both itself.
func (s Settings) ReadHorizon(now time.Time, retention time.Duration) time.Time {
	h := s.Horizon(now)
	if retention > 0 {
		if r := now.UTC().Add(-retention); r.After(h) {
			h = r
		}
	}
	return h
}

// Horizon is the oldest watch time still shown; zero when nothing is hidden
// by the user's setting (the table's retention still applies).
func (s Settings) Horizon(now time.Time) time.Time {
	if s.AutoDeleteMonths == 0 {
		return time.Time{}
	}
	return now.UTC().AddDate(0, -s.AutoDeleteMonths, 0)
}
