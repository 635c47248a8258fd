package history

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Row keys of the watch_history table:
//
//	<user prefix><reverse time, 19 digits>#<video id>
//
// and of the watch_latest table (one row per user and video, whose cell
// versions are the times the video was recorded at):
//
//	<user prefix><video id>
//
// The user prefix is the unpadded base64url of the user id followed by '#'.
// '#' is not in the base64url alphabet, so one user's prefix can never be a
// prefix of another user's keys, whatever characters the ids hold ("a" and
// "a#b", "12" and "123"). The reverse time (MaxInt64 minus the watch time in
// microseconds) sorts a user's newest watch first, so a page is one prefix
// scan with a row limit.

// UserPrefix is the key prefix of every row of the user.
func UserPrefix(userID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(userID)) + "#"
}

const reverseDigits = 19

// ReverseTime is the key part that sorts newer times first.
func ReverseTime(t time.Time) string {
	return fmt.Sprintf("%0*d", reverseDigits, int64(math.MaxInt64)-t.UnixMicro())
}

func parseReverseTime(s string) (time.Time, error) {
	if len(s) != reverseDigits {
		return time.Time{}, fmt.Errorf("reverse time %q: want %d digits", s, reverseDigits)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("reverse time %q: not a number", s)
	}
	return time.UnixMicro(math.MaxInt64 - n).UTC(), nil
}

// EntryKey is the watch_history row of one watch.
func EntryKey(userID string, at time.Time, videoID string) string {
	return UserPrefix(userID) + entrySuffix(at, videoID)
}

func entrySuffix(at time.Time, videoID string) string {
	return ReverseTime(at) + "#" + videoID
}

// ParseEntryKey splits a watch_history row key of the user.
func ParseEntryKey(userID, key string) (time.Time, string, error) {
	suffix, ok := strings.CutPrefix(key, UserPrefix(userID))
	if !ok {
		return time.Time{}, "", fmt.Errorf("history.ParseEntryKey: %q is not a row of this user", key)
	}
	return parseSuffix(suffix)
}

func parseSuffix(suffix string) (time.Time, string, error) {
	rev, video, ok := strings.Cut(suffix, "#")
	if !ok || !validVideoID(video) {
		return time.Time{}, "", fmt.Errorf("history: bad entry key suffix %q", suffix)
	}
	at, err := parseReverseTime(rev)
	if err != nil {
		return time.Time{}, "", err
	}
	return at, video, nil
}

// HorizonKey is the first key of the user's rows older than t: a scan that
// ends there returns only watches at or after t.
func HorizonKey(userID string, t time.Time) string {
	// Rows at exactly t have this reverse time followed by '#'; '$' sorts
	// right after '#', so they stay inside the range.
	return UserPrefix(userID) + ReverseTime(t) + "$"
}

// BeforeKey is the first key of the user's rows with watch time before t.
func BeforeKey(userID string, t time.Time) string { return HorizonKey(userID, t) }

// LatestKey is the watch_latest row of a user's video.
func LatestKey(userID, videoID string) string { return UserPrefix(userID) + videoID }

// UserEnd is the first key after every row of the user: the prefix with its
// final '#' raised to '$'.
func UserEnd(userID string) string {
	p := UserPrefix(userID)
	return p[:len(p)-1] + "$"
}
