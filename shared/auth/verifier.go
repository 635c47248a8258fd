package auth

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
)

const (
	// leeway absorbs clock skew between the token issuer and this instance
	// for exp, iat and auth_time.
	leeway = time.Minute
	// maxTokenLen bounds the work spent on a header: Firebase ID tokens are
	// about 1 KB, custom claims at most 1,000 bytes.
	maxTokenLen = 8 << 10
)

// Verifier checks Firebase ID tokens (RS256) against a JWKS. It is safe for
// concurrent use; build one per instance.
type Verifier struct {
	issuer   string
	audience string
	// providers are the accepted firebase.sign_in_provider values, tenant
	// the firebase.tenant a token must carry ("" for none).
	providers map[string]bool
	tenant    string
	now       func() time.Time
	keys      *keySet
	parser    *jwt.Parser
	cache     *tokenCache // nil: every token verified with RSA
}

// Option configures a Verifier.
type Option func(*Verifier)

// WithHTTPClient sets the client that fetches the key set.
func WithHTTPClient(c *http.Client) Option {
	return func(v *Verifier) { v.keys.client = c }
}

// WithClock sets the time source for token times and key-set caching (tests).
func WithClock(now func() time.Time) Option {
	return func(v *Verifier) { v.now = now }
}

// WithLogger sets where key-set fetch failures are logged.
func WithLogger(l *slog.Logger) Option {
	return func(v *Verifier) { v.keys.log = l }
}

// WithRefreshIntervals sets the least time between two key-set fetches
// caused by an unknown kid, and between two fetches after a failed one.
func WithRefreshIntervals(unknownKID, afterFailure time.Duration) Option {
	return func(v *Verifier) {
		v.keys.policy.unknownKIDInterval = unknownKID
		v.keys.policy.retryInterval = afterFailure
	}
}

// WithTokenCache remembers up to n verified tokens until they expire (0
// turns the cache off) in place of the configuration's AUTH_TOKEN_CACHE.
func WithTokenCache(n int) Option {
	return func(v *Verifier) { v.cache = newTokenCache(n, v) }
}

// NewVerifier builds a verifier for cfg. It does no I/O: the key set is
// fetched on first use, so the JWKS endpoint need not be up yet.
func NewVerifier(ctx context.Context, cfg config.Auth, opts ...Option) (*Verifier, error) {
	if cfg.Audience == "" {
		return nil, errors.New("auth.NewVerifier: empty audience (AUTH_AUDIENCE)")
	}
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("auth.NewVerifier: JWKS URL %q (AUTH_JWKS_URL) is not an http(s) URL", cfg.JWKSURL)
	}
	if err := cfg.CheckSignInProviders(); err != nil {
		return nil, fmt.Errorf("auth.NewVerifier: %w", err)
	}
	providers := map[string]bool{}
	for _, p := range cfg.AcceptedProviders() {
		providers[p] = true
	}
	v := &Verifier{
		issuer:    cfg.TokenIssuer(),
		audience:  cfg.Audience,
		providers: providers,
		tenant:    cfg.Tenant,
		now:       time.Now,
		keys: &keySet{
			url:    cfg.JWKSURL,
			client: &http.Client{Timeout: defaultKeySetPolicy.fetchTimeout},
			log:    slog.Default(),
			policy: defaultKeySetPolicy,
		},
	}
	v.cache = newTokenCache(cfg.TokenCache, v)
	for _, o := range opts {
		o(v)
	}
	v.keys.now = v.now
	v.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg()}),
		jwt.WithIssuer(v.issuer),
		jwt.WithAudience(v.audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(v.now),
		// One token, one encoding: no padding, no stray bits.
		jwt.WithStrictDecoding(),
	)
	return v, nil
}

// claims are the parts of a Firebase ID token this service reads.
type claims struct {
	jwt.RegisteredClaims
	AuthTime *jwt.NumericDate `json:"auth_time,omitempty"`
	// Moderator is any JSON value; only the boolean true grants moderation.
	Moderator any    `json:"moderator,omitempty"`
	Email     string `json:"email,omitempty"`
	// EmailVerified is any JSON value; only the boolean true verifies.
	EmailVerified any `json:"email_verified,omitempty"`
	Firebase      struct {
		SignInProvider string `json:"sign_in_provider"`
		Tenant         string `json:"tenant"`
	} `json:"firebase"`
}

// Verify checks a raw ID token and returns its user. Errors wrap
// errs.ErrInvalidToken or errs.ErrKeysUnavailable.
func (v *Verifier) Verify(ctx context.Context, raw string) (User, error) {
	if len(raw) > maxTokenLen {
		return User{}, fmt.Errorf("%w: token of %d bytes exceeds %d", errs.ErrInvalidToken, len(raw), maxTokenLen)
	}
	var hash [sha256.Size]byte
	if v.cache != nil {
		hash = sha256.Sum256([]byte(raw))
		if e, ok := v.cache.Get(hash); ok {
			// The key that verified it must still be the key set's key of
			// that kid (a refresh may have withdrawn or replaced it).
			if k, err := v.keys.key(ctx, e.kid); err == nil && k == e.key {
				return e.user, nil
			}
			v.cache.Delete(hash)
		}
	}
	var c claims
	var kid string
	var key *rsa.PublicKey
	_, err := v.parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		var ok bool
		kid, ok = t.Header["kid"].(string)
		if !ok || kid == "" {
			return nil, fmt.Errorf("%w: no kid in the header", errs.ErrInvalidToken)
		}
		k, err := v.keys.key(ctx, kid)
		key = k
		return k, err
	})
	if err != nil {
		if errors.Is(err, errs.ErrKeysUnavailable) {
			return User{}, fmt.Errorf("auth.Verify: %w", err)
		}
		if errors.Is(err, jwt.ErrTokenExpired) {
			return User{}, fmt.Errorf("auth.Verify: %w: %w: %w", errs.ErrInvalidToken, errs.ErrTokenExpired, err)
		}
		return User{}, fmt.Errorf("auth.Verify: %w: %w", errs.ErrInvalidToken, err)
	}
	if err := v.checkFirebase(&c); err != nil {
		return User{}, fmt.Errorf("auth.Verify: %w: %w", errs.ErrInvalidToken, err)
	}
	u := User{ID: c.Subject, Moderator: c.Moderator == true}
	if c.ExpiresAt != nil && key != nil {
		v.cache.PutUntil(hash, cachedToken{user: u, kid: kid, key: key}, c.ExpiresAt.Time)
	}
	return u, nil
}

// checkFirebase adds the checks Firebase documents beyond the parser's.
func (v *Verifier) checkFirebase(c *claims) error {
	if len(c.Audience) != 1 {
		return fmt.Errorf("%d audiences, want exactly %q", len(c.Audience), v.audience)
	}
	if c.IssuedAt == nil {
		return errors.New("no iat")
	}
	if c.AuthTime != nil && c.AuthTime.After(v.now().Add(leeway)) {
		return fmt.Errorf("auth_time %s is in the future", c.AuthTime.Format(time.RFC3339))
	}
	if c.Subject == "" {
		return errors.New("empty sub")
	}
	if n := utf8.RuneCountInString(c.Subject); n > maxUIDLen {
		return fmt.Errorf("sub of %d characters exceeds %d", n, maxUIDLen)
	}
	return v.checkAccount(c)
}

// checkAccount refuses accounts that cost nothing to make: a sign-in
// provider that is not accepted (anonymous unless configured), an e-mail
// address nobody proved to own, or a token of another tenant of the
// project. Its errors wrap errs.ErrAccountNotAccepted.
func (v *Verifier) checkAccount(c *claims) error {
	p := c.Firebase.SignInProvider
	if !v.providers[p] {
		return fmt.Errorf("%w: sign-in provider %q is not accepted", errs.ErrAccountNotAccepted, p)
	}
	// An e-mail account (password or e-mail link) always has an address; for
	// the others the address is verified wherever the token carries one.
	if (c.Email != "" || p == "password" || p == "email") && c.EmailVerified != true {
		return fmt.Errorf("%w: e-mail address not verified (provider %q)", errs.ErrAccountNotAccepted, p)
	}
	if c.Firebase.Tenant != v.tenant {
		return fmt.Errorf("%w: tenant %q, want %q", errs.ErrAccountNotAccepted, c.Firebase.Tenant, v.tenant)
	}
	return nil
}

// FromRequest verifies the request's "Authorization: Bearer <token>". Errors
// wrap errs.ErrMissingToken, errs.ErrInvalidToken or errs.ErrKeysUnavailable.
func (v *Verifier) FromRequest(r *http.Request) (User, error) {
	raw, err := BearerToken(r)
	if err != nil {
		return User{}, err
	}
	return v.Verify(r.Context(), raw)
}

// BearerToken returns the token of the request's "Authorization: Bearer"
// header. Its errors wrap errs.ErrMissingToken, or errs.ErrInvalidToken for a repeated
// header. Endpoints with optional auth call it first: errs.ErrMissingToken there
// means an anonymous caller.
func BearerToken(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	switch len(values) {
	case 0:
		return "", fmt.Errorf("auth.BearerToken: %w: no Authorization header", errs.ErrMissingToken)
	case 1:
	default:
		return "", fmt.Errorf("auth.BearerToken: %w: %d Authorization headers", errs.ErrInvalidToken, len(values))
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("auth.BearerToken: %w: Authorization scheme is not Bearer", errs.ErrMissingToken)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", fmt.Errorf("auth.BearerToken: %w: empty Bearer token", errs.ErrMissingToken)
	}
	return token, nil
}
