package account

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// A large account's export is prepared in the exports bucket under
// exports/<user key>/<start>: <start>.pending while it is prepared,
// <start>.json once whole (an object exists only once its upload
// completed).
const (
	preparedPrefix = "exports/"
	// PendingSuffix ends the name of the marker of an export being prepared.
	PendingSuffix = ".pending"
	// DocumentSuffix ends the name of a prepared export's document.
	DocumentSuffix = ".json"
)

// PreparedDir is the prefix of a user's prepared exports: base64url of the
// user id, since user ids may hold any character.
func PreparedDir(userID string) string {
	return preparedPrefix + base64.RawURLEncoding.EncodeToString([]byte(userID)) + "/"
}

// PreparedExport names the objects of one export prepared for a user.
type PreparedExport string

// NewPreparedExport names the export of the user started at start.
func NewPreparedExport(userID string, start time.Time) PreparedExport {
	return PreparedExport(fmt.Sprintf("%s%d", PreparedDir(userID), start.UnixNano()))
}

// Pending is the marker's name, Document the document's.
func (p PreparedExport) Pending() string  { return string(p) + PendingSuffix }
func (p PreparedExport) Document() string { return string(p) + DocumentSuffix }

// Prefix is what the names of both objects, and no other export's, start with.
func (p PreparedExport) Prefix() string { return string(p) + "." }

// ExportMessage is what the exports topic carries: one export to prepare.
// The export's state is in the bucket (the marker, the document), not in
// the message, so a message for an export already prepared, or withdrawn,
// changes nothing.
type ExportMessage struct {
	UserID string `json:"userId"`
	// Export names the objects to write.
	Export PreparedExport `json:"export"`
	// Lease is the user's export lease (accountstore.Exports), ended once
	// the export is prepared.
	Lease string `json:"lease,omitempty"`
	// Deadline is the export's: past it the user's lease and the marker
	// have lapsed, and the message is dropped.
	Deadline time.Time `json:"deadline"`
}

// Encode returns the message's wire form.
func (m ExportMessage) Encode() ([]byte, error) { return json.Marshal(m) }

// DecodeExportMessage reads a message; an error means it can never be
// worked (poison). The export must be one of the user's, so that a message
// cannot have another user's export written.
func DecodeExportMessage(b []byte) (ExportMessage, error) {
	var m ExportMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return ExportMessage{}, fmt.Errorf("account.DecodeExportMessage: %w", err)
	}
	if m.UserID == "" || len(m.UserID) > MaxUserIDBytes || !utf8.ValidString(m.UserID) {
		return ExportMessage{}, fmt.Errorf("account.DecodeExportMessage: bad user id")
	}
	start, mine := strings.CutPrefix(string(m.Export), PreparedDir(m.UserID))
	switch {
	case !mine || start == "" || strings.ContainsAny(start, "/."):
		return ExportMessage{}, fmt.Errorf("account.DecodeExportMessage: export %q is not one of the user's", m.Export)
	case m.Deadline.IsZero():
		return ExportMessage{}, fmt.Errorf("account.DecodeExportMessage: no deadline")
	}
	return m, nil
}

// ExportKind is the kind attribute (events.AttrKind) of the exports
// topic's messages.
const ExportKind = "account-export"
