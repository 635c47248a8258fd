// Package comment is the pure logic of comments: the comment and its status,
// validation of what a client sends, comment ids, the counter deltas of a post
// and the exactly-once rules of removals (delete and spam), and page tokens.
// No I/O here; commentstore keeps comments in Spanner.
//
// Counting rule: a top-level comment counts on its video while it is
// visible; a reply counts on its video and on its parent's replies while it
// and its parent are both visible. Statuses only ever leave visible, so each
// comment enters the counts once (when posted) and leaves them at most once.
// Replies of a removed parent keep their own status but are no longer
// counted, listed or open to new replies.
package comment

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
)

// Status is the moderation state of a comment.
type Status string

const (
	Visible Status = "visible"
	Deleted Status = "deleted"
	Spam    Status = "spam"
)

// ParseStatus reads a stored status.
func ParseStatus(s string) (Status, error) {
	switch Status(s) {
	case Visible, Deleted, Spam:
		return Status(s), nil
	}
	return "", fmt.Errorf("comment: unknown status %q", s)
}

// Comment is one comment or reply.
type Comment struct {
	ID       string
	VideoID  string
	ParentID string // "" for a top-level comment
	AuthorID string
	Text     string
	Status   Status
	// CreateTime is the commit time of the post; UpdateTime of the last
	// status change.
	CreateTime time.Time
	UpdateTime time.Time
}

// IsReply reports whether c answers another comment.
func (c Comment) IsReply() bool { return c.ParentID != "" }

// Listed returns the listing keys of c in its status: the video whose
// top-level listing shows it, or the parent whose replies listing shows it
// ("" when it is in no listing). Only visible comments are listed.
func (c Comment) Listed() (videoID, parentID string) {
	switch {
	case c.Status != Visible:
		return "", ""
	case c.IsReply():
		return "", c.ParentID
	}
	return c.VideoID, ""
}

// Limits of what a client sends.
const (
	MaxTextChars         = 10000
	MaxIdempotencyKeyLen = 255
	MaxRemoveBatch       = 1000
	// MaxLinks is how many links a comment may hold: enough to cite a
	// source or two, too few for a list of spam links.
	MaxLinks              = 2
	idBytes               = 16
	maxIdempotencyKeyChar = '~'
)

// Errors of validation, each with its reason (400s).
var (
	ErrEmptyText       = errs.New(errs.InvalidValue, "text", "text must hold 1 to 10000 characters and not only white space")
	ErrTextTooLong     = errs.New(errs.InvalidValue, "text", "text must hold at most 10000 characters")
	ErrInvalidUTF8     = errs.New(errs.InvalidValue, "text", "text must be valid UTF-8")
	ErrTooManyLinks    = &errs.Error{Reason: errs.TooManyLinks, Field: "text", Message: fmt.Sprintf("text may hold at most %d links", MaxLinks), Metadata: map[string]string{"maxLinks": strconv.Itoa(MaxLinks)}}
	ErrIdempotencyKey  = errs.New(errs.InvalidValue, "Idempotency-Key", "the Idempotency-Key header must be 1 to 255 printable ASCII characters")
	ErrParentIsReply   = errs.New(errs.ParentIsReply, "parentId", "parentId names a reply; threads are one level deep, so answer its top-level comment")
	ErrParentElsewhere = errs.New(errs.ParentOnOtherVideo, "parentId", "parentId names a comment of another video")
)

// ValidateText checks the text of a comment: valid UTF-8, 1 to 10,000
// characters (Unicode code points), not only white space, at most MaxLinks
// links.
func ValidateText(s string) error {
	if !utf8.ValidString(s) {
		return ErrInvalidUTF8
	}
	if utf8.RuneCountInString(s) > MaxTextChars {
		return ErrTextTooLong
	}
	if strings.TrimFunc(s, unicode.IsSpace) == "" {
		return ErrEmptyText
	}
	if CountLinks(s) > MaxLinks {
		return ErrTooManyLinks
	}
	return nil
}

// linkPattern matches what a reader's client turns into a link or a reader
// types into an address bar: a URL with a scheme, an address from "www.",
// or a host name followed by a path ("bit.ly/x", "example.com/offer").
var linkPattern = regexp.MustCompile(`(?i)\b(?:[a-z][a-z0-9+.-]*://|www\.)[^\s()<>]+|\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}/[^\s()<>]*`)

// CountLinks is the number of links in s (linkPattern).
func CountLinks(s string) int { return len(linkPattern.FindAllStringIndex(s, -1)) }

// ValidateIdempotencyKey checks an Idempotency-Key header value.
func ValidateIdempotencyKey(k string) error {
	if len(k) < 1 || len(k) > MaxIdempotencyKeyLen {
		return ErrIdempotencyKey
	}
	for i := 0; i < len(k); i++ {
		if k[i] < ' ' || k[i] > maxIdempotencyKeyChar {
			return ErrIdempotencyKey
		}
	}
	return nil
}

// NewID draws a comment id: 128 random bits, base64url (22 characters of
// [A-Za-z0-9_-]). Random, not time-ordered, so that inserts spread over the
// whole key space instead of all landing on the newest split.
func NewID() string {
	var b [idBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms.
		panic("comment: crypto/rand: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// KeyedID is the id of the comment that user's post with Idempotency-Key
// key creates: 128 bits of a hash of the two, base64url as NewID's, so that
// a retry of the post finds its comment by id, with no row of its own for
// the key. As evenly spread as a random id; one user's keys never name
// another user's comments.
func KeyedID(user, key string) string {
	h := sha256.New()
	for _, p := range []string{"comment id", user, key} {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:idBytes])
}

// RequestHash fingerprints a post for its Idempotency-Key: the same key with
// the same video, parent and text is a retry; with anything else, a mistake.
func RequestHash(videoID, parentID, text string) []byte {
	h := sha256.New()
	for _, p := range []string{videoID, parentID, text} {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

// CheckParent says whether a new comment on videoID may answer parent, the
// stored comment its parentId names. found is false when there is no such
// comment. A parent that is not visible is reported as not found: to the
// client it no longer exists.
func CheckParent(videoID string, parent Comment, found bool) error {
	switch {
	case !found || parent.Status != Visible:
		return ErrParentNotFound
	case parent.IsReply():
		return ErrParentIsReply
	case parent.VideoID != videoID:
		return ErrParentElsewhere
	}
	return nil
}

// ErrParentNotFound: the parent does not exist or is no longer visible (404).
var ErrParentNotFound = errs.New(errs.ParentNotFound, "parentId", "the comment that parentId names does not exist or was removed")

// PostEventID is the id of the counter event of a post: one per comment.
func PostEventID(commentID string) string { return events.ID("cpost", commentID) }

// PostDeltas are the counter changes of posting c: one more comment on the
// video, and for a reply one more reply on its parent, else one more thread
// on the video.
func PostDeltas(c Comment) []counter.Delta {
	ds := []counter.Delta{{Key: c.VideoID, Field: counter.Comments, N: 1}}
	if c.IsReply() {
		return append(ds, counter.Delta{Key: c.ParentID, Field: counter.Replies, N: 1})
	}
	return append(ds, counter.Delta{Key: c.VideoID, Field: counter.Threads, N: 1})
}

// PostEvent is the outbox event of posting c, accepted at now.
func PostEvent(c Comment, now time.Time) events.Event {
	return events.Event{
		ID:     PostEventID(c.ID),
		Kind:   events.KindCounterDelta,
		Outbox: true,
		Deltas: PostDeltas(c),
		Time:   now,
	}
}
