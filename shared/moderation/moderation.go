// Package moderation holds the pure logic of vote-manipulation moderation:
// the records of flagged accounts (who flagged them, when, and on what
// evidence) and the detection of accounts that react as a coordinated group.
// It does no I/O; reactionstore keeps the flags and reads the reactions, and
// functions/detectmanipulation runs the detection on a schedule.
package moderation

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Reason says who flagged an account last.
type Reason string

const (
	// ByModerator: a moderator's decision (flag or unflag), through the
	// moderation API. The detection job never overrides one.
	ByModerator Reason = "moderator"
	// Automatic: the detection job found the account in a coordinated group.
	Automatic Reason = "automatic"
)

// Flag is one flagged account as moderators list it.
type Flag struct {
	UserID    string
	Reason    Reason
	FlaggedAt time.Time
	Evidence  *Evidence // automatic flags only
}

// Item is one reaction target of a group: the content and the reaction the
// group gave it.
type Item struct {
	ContentID string `json:"contentId"`
	Reaction  string `json:"reaction"`
}

// Evidence is why an account was flagged automatically: the group it acted
// with, or (Views set) the views it was counted faster than a person can
// watch, in a group of one.
type Evidence struct {
	// Items the group reacted to together (those at least half its members
	// reacted to), most reacted first, at most MaxEvidenceItems.
	Items []Item `json:"items"`
	// WindowStart and WindowEnd bound the group's reactions on Items.
	WindowStart time.Time `json:"windowStart"`
	WindowEnd   time.Time `json:"windowEnd"`
	// GroupSize is how many accounts the group has.
	GroupSize int `json:"groupSize"`
	// YoungAccounts is how many of them were first seen less than
	// Params.YoungAge before WindowEnd.
	YoungAccounts int `json:"youngAccounts"`
	// Views, for an account flagged for its view velocity, is how many
	// views it was counted between WindowStart and WindowEnd (one clock
	// hour).
	Views int64 `json:"views,omitempty"`
	// PerMinute, BaselinePerMinute and BaselineStart, for an item flagged
	// for review by the rate-spike check (Items its one item, the window
	// its minute, GroupSize the accounts that reacted in it): its
	// reactions in the minute, and its rate over [BaselineStart,
	// WindowStart).
	PerMinute         float64   `json:"perMinute,omitempty"`
	BaselinePerMinute *float64  `json:"baselinePerMinute,omitempty"`
	BaselineStart     time.Time `json:"baselineStart,omitzero"`
}

// MaxEvidenceItems bounds the items an evidence record names.
const MaxEvidenceItems = 20

// Encode is the stored form of e (JSON).
func (e Evidence) Encode() string {
	b, err := json.Marshal(e)
	if err != nil { // only plain fields: cannot fail
		panic(err)
	}
	return string(b)
}

// DecodeEvidence reads a stored evidence record.
func DecodeEvidence(s string) (Evidence, error) {
	var e Evidence
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		return Evidence{}, fmt.Errorf("moderation: evidence: %w", err)
	}
	return e, nil
}

// Cursor is where a listing of flags continues: after the flag listed at
// At (newest first, then user id descending) of UserID.
type Cursor struct {
	At     time.Time
	UserID string
}

// ErrBadCursor is a cursor payload this package did not write.
var ErrBadCursor = errors.New("moderation: bad cursor")

// String is the cursor's payload for a page token.
func (c Cursor) String() string {
	return strconv.FormatInt(c.At.UnixNano(), 36) + "." + c.UserID
}

// ParseCursor reads a payload String wrote.
func ParseCursor(s string) (Cursor, error) {
	ts, user, ok := strings.Cut(s, ".")
	if !ok || user == "" {
		return Cursor{}, ErrBadCursor
	}
	ns, err := strconv.ParseInt(ts, 36, 64)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	return Cursor{At: time.Unix(0, ns).UTC(), UserID: user}, nil
}
