package history

import (
	"time"

	"github.com/videngage/engagement/shared/pagetoken"
)

// Cursor is where the next page starts: after the entry (time, video).
type Cursor struct {
	At      time.Time
	VideoID string
}

// PageTokens makes a cursor a page token bound to the user it was issued to.
// A token that does not open is pagetoken.ErrInvalid.
type PageTokens struct{ signer pagetoken.Signer }

// NewPageTokens signs with secret and also opens tokens of accepted.
func NewPageTokens(secret string, accepted ...string) PageTokens {
	return PageTokens{signer: pagetoken.NewSigner(secret, accepted...)}
}

func pageScope(userID string) string { return "history-page\x00" + userID }

// Encode makes the token for the user's next page.
func (p PageTokens) Encode(userID string, c Cursor) string {
	return p.signer.Encode(pageScope(userID), entrySuffix(c.At, c.VideoID))
}

// Decode checks and opens a token of the user.
func (p PageTokens) Decode(userID, token string) (Cursor, error) {
	payload, err := p.signer.Decode(pageScope(userID), token)
	if err != nil {
		return Cursor{}, err
	}
	at, video, err := parseSuffix(payload)
	if err != nil {
		return Cursor{}, pagetoken.ErrInvalid
	}
	return Cursor{At: at, VideoID: video}, nil
}

// StartKey is the first row key after the cursor.
func (c Cursor) StartKey(userID string) string {
	// The smallest key greater than the cursor's own row.
	return EntryKey(userID, c.At, c.VideoID) + "\x00"
}
