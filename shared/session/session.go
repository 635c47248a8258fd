// Package session is the session token of the API: what a write's answer
// hands the caller so that the caller's next GET /v1/me/counts can be read
// at a timestamp that holds the write, instead of strongly.
//
// A token is the commit timestamp of the caller's write, opaque to the
// client (base64url of the timestamp's Unix nanoseconds) and not signed: a
// read at a timestamp is only a freshness choice among the versions Spanner
// holds, and every read still shows the caller nothing but the public counts
// and the caller's own rows. The reader bounds what it accepts (a token from
// the future waits for that future; an old one is read no older than the
// public counts are).
package session

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
)

// Header carries a token: on the answers of writes, and back from the
// client on GET /v1/me/counts.
const Header = "Session-Token"

// ErrInvalid is a value this service never issues as a token.
var ErrInvalid = errors.New("session: not a session token")

// Encode is the token of commit timestamp t.
func Encode(t time.Time) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixNano()))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Parse returns the timestamp of a token, refusing anything Encode cannot
// have produced for a time after the Unix epoch (one spelling per token).
func Parse(token string) (time.Time, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(b) != 8 {
		return time.Time{}, ErrInvalid
	}
	n := int64(binary.BigEndian.Uint64(b))
	if n <= 0 {
		return time.Time{}, ErrInvalid
	}
	return time.Unix(0, n).UTC(), nil
}
