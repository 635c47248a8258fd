package auth

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"

	"github.com/videngage/engagement/shared/errs"
)

// keySetPolicy bounds how often the key set is fetched and how long it is used.
type keySetPolicy struct {
	// minTTL and maxTTL clamp the response's Cache-Control max-age;
	// defaultTTL applies when it has none.
	minTTL, maxTTL, defaultTTL time.Duration
	// unknownKIDInterval is the least time between two fetches caused by a
	// token whose kid is not in a fresh key set (a rotation, or garbage).
	unknownKIDInterval time.Duration
	// retryInterval is the least time between two fetches after a failed one.
	retryInterval time.Duration
	// staleGrace is how long keys past their max-age stay usable while
	// fetches fail.
	staleGrace time.Duration
	// fetchTimeout bounds one fetch.
	fetchTimeout time.Duration
}

var defaultKeySetPolicy = keySetPolicy{
	minTTL:             10 * time.Second,
	maxTTL:             24 * time.Hour,
	defaultTTL:         5 * time.Minute,
	unknownKIDInterval: 30 * time.Second,
	retryInterval:      2 * time.Second,
	staleGrace:         time.Hour,
	fetchTimeout:       10 * time.Second,
}

const (
	maxJWKSBytes  = 1 << 20
	minRSAKeyBits = 2048
)

// keySet is the remote JWKS, fetched lazily, cached for the response's
// max-age, refetched on an unknown kid (rate-limited) and after a failure
// (rate-limited). Concurrent callers share one fetch.
type keySet struct {
	url    string
	client *http.Client
	now    func() time.Time
	log    *slog.Logger
	policy keySetPolicy

	mu          sync.Mutex
	keys        map[string]*rsa.PublicKey // nil until the first successful fetch
	expires     time.Time                 // keys are fresh before this
	lastAttempt time.Time
	lastErr     error         // the last fetch's error, nil after a success
	inflight    chan struct{} // non-nil while a fetch runs, closed when it ends
}

// key returns the RSA key with the given kid. Its errors wrap errs.ErrInvalidToken
// (no such key in a key set fetched successfully) or errs.ErrKeysUnavailable.
func (s *keySet) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	fetched := false
	for {
		s.mu.Lock()
		now := s.now()
		k, have := s.keys[kid]
		fresh := s.keys != nil && now.Before(s.expires)
		if have && fresh {
			s.mu.Unlock()
			return k, nil
		}
		if fetched || !s.mayFetchLocked(now, fresh) {
			err := s.answerLocked(now, kid, have)
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return k, nil
		}
		ch := s.inflight
		if ch == nil {
			ch = make(chan struct{})
			s.inflight = ch
			s.lastAttempt = now
			// The fetch outlives a caller that gives up: others wait on it.
			go s.fetch(context.WithoutCancel(ctx), ch)
		}
		s.mu.Unlock()
		select {
		case <-ch:
			fetched = true
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for the key set: %w", errs.ErrKeysUnavailable, ctx.Err())
		}
	}
}

// mayFetchLocked says whether a caller that did not find a fresh key may start
// (or join) a fetch now.
func (s *keySet) mayFetchLocked(now time.Time, fresh bool) bool {
	if s.inflight != nil || s.lastAttempt.IsZero() {
		return true
	}
	since := now.Sub(s.lastAttempt)
	switch {
	case s.lastErr != nil:
		return since >= s.policy.retryInterval
	case !fresh:
		return true
	default:
		return since >= s.policy.unknownKIDInterval
	}
}

// answerLocked decides without fetching: a stale key within the grace period
// is used, an unknown kid in a good key set is an invalid token, and anything
// else means the keys are unavailable.
func (s *keySet) answerLocked(now time.Time, kid string, have bool) error {
	switch {
	case have && now.Before(s.expires.Add(s.policy.staleGrace)):
		return nil
	case have:
		return fmt.Errorf("%w: key set expired at %s and not refreshed: %w", errs.ErrKeysUnavailable, s.expires.Format(time.RFC3339), s.lastErr)
	case s.lastErr != nil:
		return fmt.Errorf("%w: %w", errs.ErrKeysUnavailable, s.lastErr)
	default:
		return fmt.Errorf("%w: unknown kid %q", errs.ErrInvalidToken, kid)
	}
}

func (s *keySet) fetch(ctx context.Context, done chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, s.policy.fetchTimeout)
	defer cancel()
	keys, ttl, err := s.download(ctx)

	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(done)
	s.inflight = nil
	if err != nil {
		s.lastErr = err
		s.log.WarnContext(ctx, "auth: fetching the signing key set failed", "url", s.url, "error", err)
		return
	}
	s.lastErr = nil
	s.keys = keys
	s.expires = s.now().Add(ttl)
}

func (s *keySet) download(ctx context.Context) (map[string]*rsa.PublicKey, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch %s: %w", s.url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxJWKSBytes))
		return nil, 0, fmt.Errorf("fetch %s: status %s", s.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("fetch %s: %w", s.url, err)
	}
	if len(body) > maxJWKSBytes {
		return nil, 0, fmt.Errorf("fetch %s: key set larger than %d bytes", s.url, maxJWKSBytes)
	}
	keys, err := s.parse(ctx, body)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch %s: %w", s.url, err)
	}
	return keys, s.ttl(resp.Header), nil
}

// parse keeps the RSA signing keys of a JWKS and skips (with a log line) any
// other key, so that one odd entry does not take the whole set down.
func (s *keySet) parse(ctx context.Context, body []byte) (map[string]*rsa.PublicKey, error) {
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("decode key set: %w", err)
	}
	keys := make(map[string]*rsa.PublicKey, len(set.Keys))
	for _, m := range set.Keys {
		k, err := rsaSigningKey(m)
		if err != nil {
			s.log.WarnContext(ctx, "auth: skipping a key of the signing key set", "url", s.url, "kid", m.KID, "error", err)
			continue
		}
		keys[m.KID] = k
	}
	if len(keys) == 0 {
		return nil, errors.New("key set holds no usable RS256 key")
	}
	return keys, nil
}

func rsaSigningKey(m jwkset.JWKMarshal) (*rsa.PublicKey, error) {
	if m.KID == "" {
		return nil, errors.New("no kid")
	}
	if m.KTY != jwkset.KtyRSA {
		return nil, fmt.Errorf("kty %q is not RSA", m.KTY)
	}
	if m.ALG != "" && m.ALG != jwkset.AlgRS256 {
		return nil, fmt.Errorf("alg %q is not RS256", m.ALG)
	}
	if m.USE != "" && m.USE != jwkset.UseSig {
		return nil, fmt.Errorf("use %q is not sig", m.USE)
	}
	// Only the public part is read, whatever the entry holds.
	m.D, m.P, m.Q, m.DP, m.DQ, m.QI, m.OTH = "", "", "", "", "", "", nil
	jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
	if err != nil {
		return nil, err
	}
	pub, ok := jwk.Key().(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("key is %T, not an RSA public key", jwk.Key())
	}
	if bits := pub.N.BitLen(); bits < minRSAKeyBits {
		return nil, fmt.Errorf("RSA key of %d bits, want at least %d", bits, minRSAKeyBits)
	}
	return pub, nil
}

// ttl is the response's Cache-Control max-age less its Age, clamped to the
// policy's bounds.
func (s *keySet) ttl(h http.Header) time.Duration {
	ttl := s.policy.defaultTTL
	noCache := false
	for _, d := range strings.Split(h.Get("Cache-Control"), ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), "=")
		switch strings.ToLower(name) {
		case "no-store", "no-cache":
			noCache = true
		case "max-age":
			if n, err := strconv.ParseInt(strings.Trim(value, `"`), 10, 64); err == nil && n >= 0 {
				ttl = time.Duration(min(n, int64(s.policy.maxTTL/time.Second))) * time.Second
			}
		}
	}
	if noCache {
		ttl = 0
	}
	if age, err := strconv.ParseInt(h.Get("Age"), 10, 64); err == nil && age > 0 {
		ttl -= time.Duration(min(age, int64(s.policy.maxTTL/time.Second))) * time.Second
	}
	return min(max(ttl, s.policy.minTTL), s.policy.maxTTL)
}
