package moderation

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Action is what a moderation entry records.
type Action string

const (
	// ActionFlag: an account's reactions stop counting.
	ActionFlag Action = "flag"
	// ActionUnflag: an account's reactions count again.
	ActionUnflag Action = "unflag"
	// ActionSpam: a comment was marked as spam.
	ActionSpam Action = "spam"
	// ActionDelete: a moderator deleted another's comment.
	ActionDelete Action = "delete"
	// ActionRevoke and ActionRestore: an operator took a moderator's role
	// away, or gave it back (cmd/moderators).
	ActionRevoke  Action = "revoke"
	ActionRestore Action = "restore"
	// ActionReview: a detector asks moderators to look at a video (its
	// reaction rate spiked); nothing was changed.
	ActionReview Action = "review"
)

// ActorKind says who acted.
type ActorKind string

const (
	ActorModerator ActorKind = "moderator"
	ActorAutomatic ActorKind = "automatic"
	// ActorOperator: an operator, through cmd/moderators.
	ActorOperator ActorKind = "operator"
)

// The detectors that act automatically, as the actors of their entries.
const (
	// DetectorGroups is the scheduled detection of coordinated groups
	// (functions/detectmanipulation).
	DetectorGroups = "detector:coordinated-reactions"
	// DetectorViews is the view velocity check (functions/applyviews).
	DetectorViews = "detector:view-velocity"
	// DetectorSpikes is the reaction rate-spike check
	// (functions/detectmanipulation's partitions).
	DetectorSpikes = "detector:reaction-rate"
)

// Entry is one record of the audit trail: who did what to whom, when and
// why. Entries are only ever added, in the transaction of the action.
type Entry struct {
	ID string
	// Time is the commit timestamp of the action.
	Time   time.Time
	Action Action
	// Actor is the moderator's user id, a detector's name or an operator's.
	Actor     string
	ActorKind ActorKind
	// UserID is the account acted on: the flagged or unflagged account, the
	// author of the spam or of the deleted comment, the moderator revoked or
	// restored.
	UserID string
	// CommentID and VideoID name the comment of a spam mark or a delete.
	CommentID string
	VideoID   string
	// Reason is why: the moderator's words (may be empty), or the
	// detector's summary of its evidence.
	Reason string
	// Changed is false where the action found the state it asks for (a
	// flag of a flagged account): the decision is recorded all the same.
	Changed  bool
	Evidence *Evidence
}

// Decision is a moderator's flag or unflag of accounts.
type Decision struct {
	Moderator string
	UserIDs   []string
	Flagged   bool
	// Reason is why, in the moderator's words (optional).
	Reason string
}

// MarshalJSON is the entry as the API shows it (ModerationAction in
// docs/openapi.yaml): the moderators' listing and the account export.
func (e Entry) MarshalJSON() ([]byte, error) {
	type actor struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
	}
	return json.Marshal(struct {
		ID        string    `json:"id"`
		Time      time.Time `json:"time"`
		Action    string    `json:"action"`
		Actor     actor     `json:"actor"`
		UserID    string    `json:"userId"`
		CommentID string    `json:"commentId,omitempty"`
		VideoID   string    `json:"videoId,omitempty"`
		Reason    string    `json:"reason"`
		Changed   bool      `json:"changed"`
		Evidence  *Evidence `json:"evidence,omitempty"`
	}{e.ID, e.Time.UTC(), string(e.Action), actor{e.Actor, string(e.ActorKind)}, e.UserID, e.CommentID, e.VideoID, e.Reason, e.Changed, e.Evidence})
}

// MaxReasonChars bounds a moderator's reason.
const MaxReasonChars = 500

// ValidReason checks a moderator's reason: optional, at most MaxReasonChars
// characters of valid UTF-8.
func ValidReason(s string) error {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > MaxReasonChars {
		return fmt.Errorf("reason must be at most %d characters of valid UTF-8", MaxReasonChars)
	}
	return nil
}

// Summary is the reason an automatic entry gives for its evidence.
func (e Evidence) Summary() string {
	if e.BaselinePerMinute != nil {
		return fmt.Sprintf("%.0f reactions in the minute from %s against %.2f a minute over the %s before", e.PerMinute,
			e.WindowStart.UTC().Format(time.RFC3339), *e.BaselinePerMinute, e.WindowStart.Sub(e.BaselineStart))
	}
	if e.Views > 0 {
		return fmt.Sprintf("counted %d views between %s and %s", e.Views, e.WindowStart.UTC().Format(time.RFC3339), e.WindowEnd.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("reacted with a group of %d accounts (%d young) to %d items between %s and %s",
		e.GroupSize, e.YoungAccounts, len(e.Items), e.WindowStart.UTC().Format(time.RFC3339), e.WindowEnd.UTC().Format(time.RFC3339))
}

// Filter narrows a listing of the trail to one account or one video; the
// zero Filter lists every entry.
type Filter struct {
	UserID  string
	VideoID string
}

// EntryCursor is where a listing of the trail continues: after the entry
// ID committed at Time (newest first, then id descending).
type EntryCursor struct {
	Time time.Time
	ID   string
}

// String is the cursor's payload for a page token.
func (c EntryCursor) String() string {
	return strconv.FormatInt(c.Time.UnixNano(), 36) + "." + c.ID
}

// ParseEntryCursor reads a payload String wrote.
func ParseEntryCursor(s string) (EntryCursor, error) {
	c, err := ParseCursor(s)
	if err != nil {
		return EntryCursor{}, err
	}
	return EntryCursor{Time: c.At, ID: c.UserID}, nil
}

// ErrRevoked refuses a moderation call of a moderator whose role an
// operator revoked, whatever their token says.
var ErrRevoked = errors.New("moderation: the moderator role was revoked")

// Protected reports whether a flag row stops the detectors from flagging
// its account: a flagged account is flagged already, and an unflag (a
// moderator's decision) protects the account for protection after it was
// decided (updated).
func Protected(flagged bool, updated, now time.Time, protection time.Duration) bool {
	return flagged || now.Sub(updated) < protection
}

// ScopeOf is the page-token scope of a listing with filter f: a token of
// one filter does not open another.
func (f Filter) ScopeOf() string {
	return strings.Join([]string{"moderation", "actions", f.UserID, f.VideoID}, "\x00")
}
