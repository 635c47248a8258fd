package comment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// ErrBadPageToken is a page token this service did not issue for this
// listing, or one that was altered.
var ErrBadPageToken = errors.New("comment: bad page token")

// Cursor is the last comment of a page: the next page starts after it in
// the listing's order (CreateTime, then CommentId).
type Cursor struct {
	CreateTime time.Time
	CommentID  string
}

// CursorOf is the cursor after c.
func CursorOf(c Comment) Cursor { return Cursor{CreateTime: c.CreateTime, CommentID: c.ID} }

// Listing names one listing, to which its page tokens are bound: a token of
// one video's comments does not open another video's, nor a replies listing.
type Listing string

// VideoListing is the listing of a video's top-level comments.
func VideoListing(videoID string) Listing { return Listing("video\x00" + videoID) }

// RepliesListing is the listing of a comment's replies.
func RepliesListing(commentID string) Listing { return Listing("replies\x00" + commentID) }

// PageTokens makes cursors opaque and tamper-evident: an HMAC over the
// listing and the cursor, under a server secret.
type PageTokens struct{ secret []byte }

// NewPageTokens signs with secret.
func NewPageTokens(secret string) PageTokens { return PageTokens{secret: []byte(secret)} }

func (p PageTokens) mac(l Listing, payload string) []byte {
	m := hmac.New(sha256.New, p.secret)
	m.Write([]byte("comment-page\x00"))
	m.Write([]byte(l))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return m.Sum(nil)[:16]
}

// Encode makes the token of the page after c in listing l.
func (p PageTokens) Encode(l Listing, c Cursor) string {
	payload := strconv.FormatInt(c.CreateTime.UnixNano(), 36) + "." + c.CommentID
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." +
		base64.RawURLEncoding.EncodeToString(p.mac(l, payload))
}

// Decode checks and opens a token of listing l.
func (p PageTokens) Decode(l Listing, token string) (Cursor, error) {
	b64payload, b64mac, ok := strings.Cut(token, ".")
	if !ok {
		return Cursor{}, ErrBadPageToken
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(b64payload)
	mac, err2 := base64.RawURLEncoding.DecodeString(b64mac)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, p.mac(l, string(payload))) {
		return Cursor{}, ErrBadPageToken
	}
	ts, id, ok := strings.Cut(string(payload), ".")
	if !ok || id == "" {
		return Cursor{}, ErrBadPageToken
	}
	ns, err := strconv.ParseInt(ts, 36, 64)
	if err != nil {
		return Cursor{}, ErrBadPageToken
	}
	return Cursor{CreateTime: time.Unix(0, ns).UTC(), CommentID: id}, nil
}
