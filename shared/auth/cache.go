package auth

import (
	"crypto/rsa"
	"crypto/sha256"
	"sync"
	"time"
)

// DefaultTokenCacheSize is how many verified tokens an instance remembers by
// default (AUTH_TOKEN_CACHE).
const DefaultTokenCacheSize = 10000

// tokenCache remembers tokens verified on this instance, keyed by a hash of
// the token, until they expire: a client sends the same token with every
// request for up to an hour, and RSA verification is the largest CPU cost of
// a request. An entry holds the key that verified it; it is used only while
// the key set still serves that very key under that kid, so a signing key
// withdrawn from the key set (or replaced) takes its tokens with it at the
// key set's next refresh, as without the cache.
type tokenCache struct {
	mu      sync.Mutex
	max     int
	entries map[[sha256.Size]byte]cachedToken
}

type cachedToken struct {
	user    User
	kid     string
	key     *rsa.PublicKey
	expires time.Time // the token's exp, without the leeway
}

func newTokenCache(max int) *tokenCache {
	if max <= 0 {
		return nil
	}
	return &tokenCache{max: max, entries: make(map[[sha256.Size]byte]cachedToken)}
}

// get returns the entry of hash if it has not expired at now.
func (c *tokenCache) get(hash [sha256.Size]byte, now time.Time) (cachedToken, bool) {
	if c == nil {
		return cachedToken{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok {
		return cachedToken{}, false
	}
	if !now.Before(e.expires) {
		delete(c.entries, hash)
		return cachedToken{}, false
	}
	return e, true
}

// put remembers a verified token. When full it first drops the expired
// entries, then, if still full, one entry at random (map order).
func (c *tokenCache) put(hash [sha256.Size]byte, e cachedToken, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		for h, old := range c.entries {
			if !now.Before(old.expires) {
				delete(c.entries, h)
			}
		}
		for h := range c.entries {
			if len(c.entries) < c.max {
				break
			}
			delete(c.entries, h)
		}
	}
	c.entries[hash] = e
}

// drop forgets hash.
func (c *tokenCache) drop(hash [sha256.Size]byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.entries, hash)
	c.mu.Unlock()
}
