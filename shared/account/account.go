// Package account is the logic of a user's own data beyond one domain: the
// erasure of an account (DELETE /v1/me), its phases and the message that
// drives it, and the export (GET /v1/me/export): its document, the limit on
// exports and the prepared exports' names and message. Eraser and Exporter
// work through the domains' stores, declared here as the small interfaces
// they need; accountstore keeps the erasure records in Spanner.
package account

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Phase is the step an erasure is at. The phases run in this order; each is
// repeated until it finds nothing left, then the record moves on.
type Phase string

const (
	// Reactions: each reaction set to none, in the reaction store's
	// transaction (the totals go down exactly once).
	Reactions Phase = "reactions"
	// Comments: each comment removed as a deletion (its visible replies
	// leave the counts with it), then its row deleted.
	Comments Phase = "comments"
	// History: the history cleared (the clear recorded first, so that a
	// watch in flight removes itself when it arrives), then every entry.
	History Phase = "history"
	// Rows: the user's rate-limit rows (Spanner and Bigtable), idempotency
	// keys, moderation flag row, export record, and the settings' values.
	Rows Phase = "rows"
	// Settle waits until the history messages the user's last watches were
	// in can no longer be delivered (Settle after the request), so that the
	// views' claims are not removed while a batch that owns one may still
	// be redelivered and count it again.
	Settle Phase = "settle"
	// Latest: the user's watch_latest rows (watch times, deletions, the
	// views' claims), but the history's clear, which a late watch needs.
	Latest Phase = "latest"
	// Identity: the user's Identity Platform account, once their data is
	// erased; while it cannot be deleted the erasure stays here, its
	// refusals of the user's writes standing, and is tried again.
	Identity Phase = "identity"
	// Settings: the settings document, and with it the refusal of history
	// writes; then the record is done.
	Settings Phase = "settings"
	Done     Phase = "done"
)

// Next is the phase after p.
func (p Phase) Next() Phase {
	switch p {
	case Reactions:
		return Comments
	case Comments:
		return History
	case History:
		return Rows
	case Rows:
		return Settle
	case Settle:
		return Latest
	case Latest:
		return Identity
	case Identity:
		return Settings
	}
	return Done
}

// Valid reports whether p names a phase.
func (p Phase) Valid() bool {
	switch p {
	case Reactions, Comments, History, Rows, Settle, Latest, Identity, Settings, Done:
		return true
	}
	return false
}

// Figures are what an erasure removed (reported).
type Figures struct {
	Reactions   int64
	Comments    int64
	HistoryRows int64
	Steps       int64
}

// Erasure is one user's erasure record.
type Erasure struct {
	UserID      string
	RequestTime time.Time
	Phase       Phase
	UpdateTime  time.Time
	DoneTime    time.Time // zero while open
	Figures
}

// Open reports whether the erasure is under way.
func (e Erasure) Open() bool { return e.DoneTime.IsZero() }

// Message is what the erasure topic carries: the user to work on. The state
// is the record's, so any message for a user resumes its erasure where it is.
type Message struct {
	UserID string `json:"userId"`
}

// MaxUserIDBytes bounds a user id (the records' key is STRING(128)).
const MaxUserIDBytes = 512

// Encode returns the message's wire form.
func (m Message) Encode() ([]byte, error) { return json.Marshal(m) }

// DecodeMessage reads a message; an error means it can never be worked
// (poison).
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("account.DecodeMessage: %w", err)
	}
	if m.UserID == "" || len(m.UserID) > MaxUserIDBytes || !utf8.ValidString(m.UserID) {
		return Message{}, fmt.Errorf("account.DecodeMessage: bad user id")
	}
	return m, nil
}
