// Package auth verifies the caller's identity: a Firebase Auth / Identity
// Platform ID token (RS256, keys published as a JWKS) in the Authorization
// header. The same Verifier runs in the cloud, against Google's securetoken key
// set, and in the local stack, against the key set of internal/localauth's issuer.
package auth

// User is the authenticated caller.
type User struct {
	// ID is the token's sub: the Firebase uid. It may hold any character.
	ID string
	// Moderator is true when the token carries the custom claim "moderator": true.
	Moderator bool
}

// maxUIDLen is Firebase's limit on a uid, in characters.
const maxUIDLen = 128
