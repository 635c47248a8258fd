// Package pagetoken makes a listing's cursor opaque and tamper-evident: the
// cursor's bytes and an HMAC over them and the listing they belong to, under
// a server secret. Each listing encodes its own cursor; this package signs
// and checks it, and decodes strictly, so a token has exactly one spelling.
package pagetoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// ErrInvalid is a page token this service did not issue for this listing,
// or one that was altered.
var ErrInvalid = errors.New("pagetoken: not a page token of this listing")

// Signer signs page tokens under one secret and opens those of that secret
// or of the accepted ones: during a rotation, the other side's secret, so
// that instances on either secret open each other's tokens.
type Signer struct {
	secret   []byte
	accepted [][]byte
}

// NewSigner signs with secret and also opens tokens signed with accepted.
func NewSigner(secret string, accepted ...string) Signer {
	s := Signer{secret: []byte(secret)}
	for _, a := range accepted {
		if a != "" && a != secret {
			s.accepted = append(s.accepted, []byte(a))
		}
	}
	return s
}

// macLen is the bytes of the HMAC a token keeps: 128 bits.
const macLen = 16

func mac(secret []byte, scope, payload string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(scope))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return m.Sum(nil)[:macLen]
}

// Encode is the token of payload in scope. The scope names the listing the
// token opens (its kind and whose or which it is, e.g.
// "history-page\x00"+userID): a token of one scope does not open another.
// The token is base64url without padding, safe in a query string as it is.
func (s Signer) Encode(scope, payload string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." +
		base64.RawURLEncoding.EncodeToString(mac(s.secret, scope, payload))
}

// Decode checks a token of scope and returns its payload, or ErrInvalid.
func (s Signer) Decode(scope, token string) (string, error) {
	b64payload, b64mac, ok := strings.Cut(token, ".")
	// encoding/base64 skips CR and LF anywhere in its input, even Strict:
	// a token with them would decode as the one without.
	if !ok || strings.ContainsAny(token, "\r\n") {
		return "", ErrInvalid
	}
	// Strict: a token has one spelling; spare bits of the last character
	// set would make altered tokens decode to the same bytes.
	payload, err1 := base64.RawURLEncoding.Strict().DecodeString(b64payload)
	sum, err2 := base64.RawURLEncoding.Strict().DecodeString(b64mac)
	if err1 != nil || err2 != nil {
		return "", ErrInvalid
	}
	for _, secret := range append([][]byte{s.secret}, s.accepted...) {
		if hmac.Equal(sum, mac(secret, scope, string(payload))) {
			return string(payload), nil
		}
	}
	return "", ErrInvalid
}
