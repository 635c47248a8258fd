package comment

import (
	"strconv"
	"strings"
	"time"

	"github.com/videngage/engagement/shared/pagetoken"
)

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

// PageTokens makes a cursor a page token bound to its listing. A token that
// does not open is pagetoken.ErrInvalid.
type PageTokens struct{ signer pagetoken.Signer }

// NewPageTokens signs with secret and also opens tokens of accepted.
func NewPageTokens(secret string, accepted ...string) PageTokens {
	return PageTokens{signer: pagetoken.NewSigner(secret, accepted...)}
}

func pageScope(l Listing) string { return "comment-page\x00" + string(l) }

// Encode makes the token of the page after c in listing l.
func (p PageTokens) Encode(l Listing, c Cursor) string {
	return p.signer.Encode(pageScope(l), strconv.FormatInt(c.CreateTime.UnixNano(), 36)+"."+c.CommentID)
}

// Decode checks and opens a token of listing l.
func (p PageTokens) Decode(l Listing, token string) (Cursor, error) {
	payload, err := p.signer.Decode(pageScope(l), token)
	if err != nil {
		return Cursor{}, err
	}
	ts, id, ok := strings.Cut(payload, ".")
	if !ok || id == "" {
		return Cursor{}, pagetoken.ErrInvalid
	}
	ns, err := strconv.ParseInt(ts, 36, 64)
	if err != nil {
		return Cursor{}, pagetoken.ErrInvalid
	}
	return Cursor{CreateTime: time.Unix(0, ns).UTC(), CommentID: id}, nil
}
