package history

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"time"
)

// ErrBadPageToken is returned for a page token that was not issued to this
// user by this service, or was altered.
var ErrBadPageToken = errors.New("history: bad page token")

// Cursor is where the next page starts: after the entry (time, video).
type Cursor struct {
	At      time.Time
	VideoID string
}

// PageTokens signs cursors so that a token is opaque, tamper-evident and
// bound to the user it was issued to.
type PageTokens struct{ secret []byte }

// NewPageTokens signs with secret.
func NewPageTokens(secret string) PageTokens { return PageTokens{secret: []byte(secret)} }

func (p PageTokens) mac(userID, payload string) []byte {
	m := hmac.New(sha256.New, p.secret)
	m.Write([]byte("history-page\x00"))
	m.Write([]byte(userID))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return m.Sum(nil)[:16]
}

// Encode makes the token for the user's next page.
func (p PageTokens) Encode(userID string, c Cursor) string {
	payload := entrySuffix(c.At, c.VideoID)
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." +
		base64.RawURLEncoding.EncodeToString(p.mac(userID, payload))
}

// Decode checks and opens a token of the user.
func (p PageTokens) Decode(userID, token string) (Cursor, error) {
	b64payload, b64mac, ok := strings.Cut(token, ".")
	if !ok {
		return Cursor{}, ErrBadPageToken
	}
	// Strict: a token has one spelling; spare bits of the last character
	// set would make altered tokens decode to the same bytes.
	payload, err1 := base64.RawURLEncoding.Strict().DecodeString(b64payload)
	mac, err2 := base64.RawURLEncoding.Strict().DecodeString(b64mac)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, p.mac(userID, string(payload))) {
		return Cursor{}, ErrBadPageToken
	}
	at, video, err := parseSuffix(string(payload))
	if err != nil {
		return Cursor{}, ErrBadPageToken
	}
	return Cursor{At: at, VideoID: video}, nil
}

// StartKey is the first row key after the cursor.
func (c Cursor) StartKey(userID string) string {
	// The smallest key greater than the cursor's own row.
	return EntryKey(userID, c.At, c.VideoID) + "\x00"
}
