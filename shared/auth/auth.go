// Package auth verifies the caller's identity: a Firebase Auth / Identity
// Platform ID token (RS256, keys published as a JWKS) in the Authorization
// header. The same Verifier runs in the cloud, against Google's securetoken key
// set, and in the local stack, against the key set of a LocalIssuer.
package auth

import "errors"

// User is the authenticated caller.
type User struct {
	// ID is the token's sub: the Firebase uid. It may hold any character.
	ID string
	// Moderator is true when the token carries the custom claim "moderator": true.
	Moderator bool
}

// The errors Verify and FromRequest return wrap exactly one of these. Their
// text carries detail for logs; callers answer with a fixed message.
var (
	// ErrMissingToken: no Authorization header, or not a Bearer token (401).
	ErrMissingToken = errors.New("auth: missing bearer token")
	// ErrInvalidToken: a token was presented but is not acceptable (401).
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrKeysUnavailable: the signing keys could not be fetched, so the token
	// could be neither accepted nor rejected (503, retry later).
	ErrKeysUnavailable = errors.New("auth: signing keys unavailable")
)

// maxUIDLen is Firebase's limit on a uid, in characters.
const maxUIDLen = 128
