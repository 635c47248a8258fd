package account

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// LogEntry is one erasure in the erasure log: the user and when the erasure
// was asked for, and nothing else. The log is kept outside every store a
// restore rolls back (Spanner, Bigtable, Firestore), so that the erasures
// can be asked for again after a restore (ReplayLog); an entry is kept as
// long as a backup or recovery window that predates it may still be
// restored, then deleted (docs/design/account.md, "The erasure log").
type LogEntry struct {
	UserID      string    `json:"userId"`
	RequestTime time.Time `json:"requestTime"`
}

// LogPrefix is where the log's objects are named: LogPrefix, the UTC day,
// then the time of the request and a random suffix. Names sort by time, a
// day is one prefix, and no name holds the user id.
const LogPrefix = "erasures/"

const (
	logDay  = "2006-01-02"
	logTime = "150405.000000000Z"
)

// LogObjectName names the entry of a request at t; suffix makes two
// requests in one nanosecond two objects.
func LogObjectName(t time.Time, suffix string) string {
	t = t.UTC()
	return LogPrefix + t.Format(logDay) + "/" + t.Format(logTime) + "-" + suffix + ".json"
}

// LogObjectTime reads the request time from an object's name.
func LogObjectTime(name string) (time.Time, error) {
	rest, ok := strings.CutPrefix(name, LogPrefix)
	day, clock, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || len(clock) < len(logTime) {
		return time.Time{}, fmt.Errorf("account.LogObjectTime(%q): not an erasure log object", name)
	}
	t, err := time.Parse(logDay+"/"+logTime, day+"/"+clock[:len(logTime)])
	if err != nil {
		return time.Time{}, fmt.Errorf("account.LogObjectTime(%q): %w", name, err)
	}
	return t, nil
}

// LogDayPrefixes are the name prefixes of the UTC days from since's to
// until's, in order: what a listing of the entries since a time reads.
func LogDayPrefixes(since, until time.Time) []string {
	var out []string
	day := since.UTC().Truncate(24 * time.Hour)
	for end := until.UTC(); !day.After(end); day = day.Add(24 * time.Hour) {
		out = append(out, LogPrefix+day.Format(logDay)+"/")
	}
	return out
}

// Encode returns the entry's object content.
func (e LogEntry) Encode() ([]byte, error) {
	e.RequestTime = e.RequestTime.UTC()
	return json.Marshal(e)
}

// DecodeLogEntry reads an entry's object content.
func DecodeLogEntry(b []byte) (LogEntry, error) {
	var e LogEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return LogEntry{}, fmt.Errorf("account.DecodeLogEntry: %w", err)
	}
	if e.UserID == "" || len(e.UserID) > MaxUserIDBytes || !utf8.ValidString(e.UserID) || e.RequestTime.IsZero() {
		return LogEntry{}, fmt.Errorf("account.DecodeLogEntry: bad entry %q", b)
	}
	return e, nil
}
