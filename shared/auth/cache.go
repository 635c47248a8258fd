package auth

import (
	"crypto/rsa"
	"crypto/sha256"
	"time"

	"github.com/videngage/engagement/shared/cache"
)

// tokenCache remembers tokens verified on this instance, keyed by a hash of
// the token, until they expire: a client sends the same token with every
// request for up to an hour, and RSA verification is the largest CPU cost of
// a request. An entry holds the key that verified it; it is used only while
// the key set still serves that very key under that kid, so a signing key
// withdrawn from the key set (or replaced) takes its tokens with it at the
// key set's next refresh, as without the cache. nil remembers nothing.
type tokenCache = cache.Map[[sha256.Size]byte, cachedToken]

type cachedToken struct {
	user User
	kid  string
	key  *rsa.PublicKey
}

// newTokenCache remembers up to max tokens, expiring by v's clock; nil if
// max is not positive.
func newTokenCache(max int, v *Verifier) *tokenCache {
	return cache.New[[sha256.Size]byte, cachedToken](max, func() time.Time { return v.now() })
}
