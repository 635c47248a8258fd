package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
)

func TestVerify(t *testing.T) {
	a, other, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	now := clock.now()
	long := strings.Repeat("x", maxUIDLen)

	tests := []struct {
		name    string
		token   string
		want    User
		wantErr error
	}{
		{name: "valid", token: mint(t, a, "alice", localauth.IssuedAt(now)), want: User{ID: "alice"}},
		{name: "moderator", token: mint(t, a, "bob", localauth.IssuedAt(now), localauth.Moderator()), want: User{ID: "bob", Moderator: true}},
		{name: "moderator claim false", token: mint(t, a, "bob", localauth.IssuedAt(now), localauth.Claim("moderator", false)), want: User{ID: "bob"}},
		{name: "moderator claim as a string", token: mint(t, a, "bob", localauth.IssuedAt(now), localauth.Claim("moderator", "true")), want: User{ID: "bob"}},
		{name: "uid with any characters", token: mint(t, a, "a/b:c\x00ü 🙂", localauth.IssuedAt(now)), want: User{ID: "a/b:c\x00ü 🙂"}},
		{name: "sub of 128 characters", token: mint(t, a, long, localauth.IssuedAt(now)), want: User{ID: long}},
		{name: "sub of 128 multibyte characters", token: mint(t, a, strings.Repeat("é", maxUIDLen), localauth.IssuedAt(now)), want: User{ID: strings.Repeat("é", maxUIDLen)}},
		{name: "issued an hour ago, expires in a second", token: mint(t, a, "alice", localauth.IssuedAt(now.Add(-time.Hour)), localauth.ExpiresAt(now.Add(time.Second))), want: User{ID: "alice"}},
		{name: "expired within leeway", token: mint(t, a, "alice", localauth.IssuedAt(now.Add(-time.Hour)), localauth.ExpiresAt(now.Add(-leeway/2))), want: User{ID: "alice"}},
		{name: "iat in the future within leeway", token: mint(t, a, "alice", localauth.IssuedAt(now.Add(leeway/2))), want: User{ID: "alice"}},
		{name: "without auth_time", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("auth_time", nil)), want: User{ID: "alice"}},
		{name: "Google account with a verified address", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("google.com"), localauth.Email("alice@example.com", true)), want: User{ID: "alice"}},
		{name: "Google account without an address", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("google.com")), want: User{ID: "alice"}},

		{name: "anonymous account", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("anonymous")), wantErr: errs.ErrAccountNotAccepted},
		{name: "custom token", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("custom")), wantErr: errs.ErrAccountNotAccepted},
		{name: "phone account", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("phone")), wantErr: errs.ErrAccountNotAccepted},
		{name: "no sign-in provider", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("firebase", map[string]any{})), wantErr: errs.ErrAccountNotAccepted},
		{name: "no firebase claim", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("firebase", nil)), wantErr: errs.ErrAccountNotAccepted},
		{name: "password account, address not verified", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Email("alice@example.com", false)), wantErr: errs.ErrAccountNotAccepted},
		{name: "password account without an address", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Email("", false)), wantErr: errs.ErrAccountNotAccepted},
		{name: "Google account, address not verified", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("google.com"), localauth.Email("alice@example.com", false)), wantErr: errs.ErrAccountNotAccepted},
		{name: "email_verified as a string", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("email_verified", "true")), wantErr: errs.ErrAccountNotAccepted},
		{name: "token of a tenant", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Tenant("tenant-1")), wantErr: errs.ErrAccountNotAccepted},

		{name: "expired", token: mint(t, a, "alice", localauth.IssuedAt(now.Add(-2*time.Hour)), localauth.ExpiresAt(now.Add(-2*leeway))), wantErr: errs.ErrTokenExpired},
		{name: "no exp", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("exp", nil)), wantErr: errs.ErrInvalidToken},
		{name: "iat in the future", token: mint(t, a, "alice", localauth.IssuedAt(now.Add(2*leeway))), wantErr: errs.ErrInvalidToken},
		{name: "no iat", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("iat", nil)), wantErr: errs.ErrInvalidToken},
		{name: "auth_time in the future", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("auth_time", now.Add(2*leeway).Unix())), wantErr: errs.ErrInvalidToken},
		{name: "wrong key", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignWith(other)), wantErr: errs.ErrInvalidToken},
		{name: "key not in the set", token: mint(t, other, "alice", localauth.IssuedAt(now)), wantErr: errs.ErrInvalidToken},
		{name: "no kid", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.KeyID("")), wantErr: errs.ErrInvalidToken},
		{name: "wrong audience", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Audience("other-project")), wantErr: errs.ErrInvalidToken},
		{name: "extra audience", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("aud", []string{testAudience, "other-project"})), wantErr: errs.ErrInvalidToken},
		{name: "no audience", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("aud", nil)), wantErr: errs.ErrInvalidToken},
		{name: "wrong issuer", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Iss("https://securetoken.google.com/other-project")), wantErr: errs.ErrInvalidToken},
		{name: "alg none", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.AlgNone()), wantErr: errs.ErrInvalidToken},
		{name: "HS256 with the public key as secret", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.HS256WithPublicKey()), wantErr: errs.ErrInvalidToken},
		{name: "sub empty", token: mint(t, a, "", localauth.IssuedAt(now)), wantErr: errs.ErrInvalidToken},
		{name: "sub of 129 characters", token: mint(t, a, long+"x", localauth.IssuedAt(now)), wantErr: errs.ErrInvalidToken},
		{name: "sub not a string", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("sub", 42)), wantErr: errs.ErrInvalidToken},
		{name: "empty", token: "", wantErr: errs.ErrInvalidToken},
		{name: "malformed", token: "not-a-token", wantErr: errs.ErrInvalidToken},
		{name: "three garbage parts", token: "a.b.c", wantErr: errs.ErrInvalidToken},
		{name: "signature removed", token: strings.Join(strings.Split(mint(t, a, "alice", localauth.IssuedAt(now)), ".")[:2], ".") + ".", wantErr: errs.ErrInvalidToken},
		{name: "padded encoding", token: mint(t, a, "alice", localauth.IssuedAt(now)) + "==", wantErr: errs.ErrInvalidToken},
		{name: "too long", token: mint(t, a, "alice", localauth.IssuedAt(now), localauth.Claim("pad", strings.Repeat("p", maxTokenLen))), wantErr: errs.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := v.Verify(context.Background(), tt.token)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Verify() error = %v, want %v", err, tt.wantErr)
				}
				if errors.Is(err, errs.ErrKeysUnavailable) || errors.Is(err, errs.ErrMissingToken) || !errors.Is(err, errs.ErrInvalidToken) {
					t.Fatalf("Verify() error = %v matches another sentinel, or not ErrInvalidToken", err)
				}
				if tt.wantErr != errs.ErrTokenExpired && errors.Is(err, errs.ErrTokenExpired) {
					t.Fatalf("Verify() error = %v says expired", err)
				}
				if got != (User{}) {
					t.Errorf("Verify() user = %+v with an error, want zero", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify() error = %v", err)
			}
			if got != tt.want {
				t.Errorf("Verify() = %+v, want %+v", got, tt.want)
			}
		})
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("key set fetched %d times, want 1 (cached)", n)
	}
}

// A tampered payload keeps the header and signature of a good token.
func TestVerifyRejectsTamperedPayload(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	good := strings.Split(mint(t, a, "alice", localauth.IssuedAt(clock.now())), ".")
	mod := strings.Split(mint(t, a, "alice", localauth.IssuedAt(clock.now()), localauth.Moderator()), ".")
	forged := good[0] + "." + mod[1] + "." + good[2]
	if _, err := v.Verify(context.Background(), forged); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("Verify(tampered) error = %v, want errs.ErrInvalidToken", err)
	}
}

func TestFromRequest(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	tok := mint(t, a, "alice", localauth.IssuedAt(clock.now()))

	tests := []struct {
		name    string
		headers []string
		want    User
		wantErr error
	}{
		{name: "bearer", headers: []string{"Bearer " + tok}, want: User{ID: "alice"}},
		{name: "scheme in lower case", headers: []string{"bearer " + tok}, want: User{ID: "alice"}},
		{name: "missing header", wantErr: errs.ErrMissingToken},
		{name: "empty header", headers: []string{""}, wantErr: errs.ErrMissingToken},
		{name: "basic", headers: []string{"Basic x"}, wantErr: errs.ErrMissingToken},
		{name: "bearer without token", headers: []string{"Bearer "}, wantErr: errs.ErrMissingToken},
		{name: "token without scheme", headers: []string{tok}, wantErr: errs.ErrMissingToken},
		{name: "malformed bearer", headers: []string{"Bearer x.y.z"}, wantErr: errs.ErrInvalidToken},
		{name: "two headers", headers: []string{"Bearer " + tok, "Bearer " + tok}, wantErr: errs.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/history", nil)
			for _, h := range tt.headers {
				r.Header.Add("Authorization", h)
			}
			got, err := v.FromRequest(r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("FromRequest() error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromRequest() error = %v", err)
			}
			if got != tt.want {
				t.Errorf("FromRequest() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewVerifier(t *testing.T) {
	tests := []struct {
		name    string
		cfg     config.Auth
		wantErr bool
	}{
		{name: "default URL", cfg: config.Auth{Audience: "p", JWKSURL: "https://www.googleapis.com/service_accounts/v1/jwk/securetoken@system.gserviceaccount.com"}},
		// Nothing listens there: construction must not fetch.
		{name: "local URL not listening", cfg: config.Auth{Audience: "p", JWKSURL: "http://127.0.0.1:1/jwks"}},
		{name: "no audience", cfg: config.Auth{JWKSURL: "https://example.com/jwks"}, wantErr: true},
		{name: "no URL", cfg: config.Auth{Audience: "p"}, wantErr: true},
		{name: "not http", cfg: config.Auth{Audience: "p", JWKSURL: "file:///etc/jwks"}, wantErr: true},
		{name: "providers", cfg: config.Auth{Audience: "p", JWKSURL: "https://example.com/jwks", SignInProviders: []string{"password", "anonymous", "oidc.corp", "saml.idp"}}},
		{name: "misspelt provider", cfg: config.Auth{Audience: "p", JWKSURL: "https://example.com/jwks", SignInProviders: []string{"password", "google"}}, wantErr: true},
		{name: "bare oidc provider", cfg: config.Auth{Audience: "p", JWKSURL: "https://example.com/jwks", SignInProviders: []string{"oidc."}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewVerifier(context.Background(), tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewVerifier() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && v.issuer != tt.cfg.TokenIssuer() {
				t.Errorf("issuer = %q, want %q", v.issuer, tt.cfg.TokenIssuer())
			}
		})
	}
}

// The configured sign-in providers and tenant replace the defaults: only
// their tokens pass.
func TestConfiguredAccounts(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	cfg := testConfig(srv.URL)
	cfg.SignInProviders = []string{"anonymous", "phone", "email"}
	cfg.Tenant = "tenant-1"
	v, err := NewVerifier(context.Background(), cfg, WithClock(clock.now))
	if err != nil {
		t.Fatal(err)
	}
	now := clock.now()
	for _, tt := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"anonymous of the tenant", mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("anonymous"), localauth.Tenant("tenant-1")), true},
		{"phone of the tenant", mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("phone"), localauth.Tenant("tenant-1")), true},
		{"password of the tenant, not listed", mint(t, a, "alice", localauth.IssuedAt(now), localauth.Tenant("tenant-1")), false},
		{"e-mail link of the tenant, address verified", mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("email"), localauth.Email("alice@example.com", true), localauth.Tenant("tenant-1")), true},
		{"e-mail link of the tenant without an address", mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("email"), localauth.Tenant("tenant-1")), false},
		{"anonymous of no tenant", mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("anonymous")), false},
		{"anonymous of another tenant", mint(t, a, "alice", localauth.IssuedAt(now), localauth.SignInProvider("anonymous"), localauth.Tenant("tenant-2")), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tt.token)
			if tt.ok && err != nil {
				t.Fatalf("Verify() error = %v", err)
			}
			if !tt.ok && !errors.Is(err, errs.ErrAccountNotAccepted) {
				t.Fatalf("Verify() error = %v, want errs.ErrAccountNotAccepted", err)
			}
		})
	}
}

func TestIssuerOverride(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	cfg := testConfig(srv.URL)
	cfg.Issuer = "https://issuer.example"
	v, err := NewVerifier(context.Background(), cfg, WithClock(clock.now))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), mint(t, a, "alice", localauth.IssuedAt(clock.now()))); !errors.Is(err, errs.ErrInvalidToken) {
		t.Errorf("default issuer: error = %v, want errs.ErrInvalidToken", err)
	}
	if _, err := v.Verify(context.Background(), mint(t, a, "alice", localauth.IssuedAt(clock.now()), localauth.Iss(cfg.Issuer))); err != nil {
		t.Errorf("configured issuer: error = %v", err)
	}
}

func TestKeyRotation(t *testing.T) {
	a, b, c := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	ctx := context.Background()
	verify := func(i *localauth.Issuer) error {
		_, err := v.Verify(ctx, mint(t, i, "alice", localauth.IssuedAt(clock.now())))
		return err
	}

	if err := verify(a); err != nil {
		t.Fatalf("key a: %v", err)
	}
	// b is published while the cached set is fresh; the first token from b
	// is within the unknown-kid interval of the first fetch.
	srv.serve(t, a, b)
	if err := verify(b); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("key b within the refresh interval: error = %v, want errs.ErrInvalidToken", err)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("fetches = %d, want 1 (unknown kid is rate-limited)", n)
	}
	clock.advance(defaultKeySetPolicy.unknownKIDInterval)
	if err := verify(b); err != nil {
		t.Fatalf("key b after the refresh interval: %v", err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2", n)
	}
	// An unknown kid right after a fetch does not fetch again.
	for range 5 {
		if err := verify(c); !errors.Is(err, errs.ErrInvalidToken) {
			t.Fatalf("key c: error = %v, want errs.ErrInvalidToken", err)
		}
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2 (unknown kid is rate-limited)", n)
	}
	// a is retired: gone at the next fetch.
	srv.serve(t, b)
	clock.advance(defaultKeySetPolicy.unknownKIDInterval)
	if err := verify(c); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("key c: error = %v, want errs.ErrInvalidToken", err)
	}
	if err := verify(a); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("retired key a: error = %v, want errs.ErrInvalidToken", err)
	}
	if err := verify(b); err != nil {
		t.Fatalf("key b: %v", err)
	}
}

func TestKeysUnavailable(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	srv.setDown(true)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	ctx := context.Background()
	tok := mint(t, a, "alice", localauth.IssuedAt(clock.now()))

	for range 3 {
		_, err := v.Verify(ctx, tok)
		if !errors.Is(err, errs.ErrKeysUnavailable) || errors.Is(err, errs.ErrInvalidToken) {
			t.Fatalf("server down: error = %v, want errs.ErrKeysUnavailable only", err)
		}
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("fetches = %d, want 1 (retries are rate-limited)", n)
	}
	// Still down after the retry interval: one more attempt.
	clock.advance(defaultKeySetPolicy.retryInterval)
	if _, err := v.Verify(ctx, tok); !errors.Is(err, errs.ErrKeysUnavailable) {
		t.Fatalf("still down: error = %v, want errs.ErrKeysUnavailable", err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2", n)
	}
	// Back up: recovered at the next attempt, the failure was not cached.
	srv.setDown(false)
	clock.advance(defaultKeySetPolicy.retryInterval)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	// Garbage is still an invalid token whatever the key set's state.
	srv.setDown(true)
	if _, err := v.Verify(ctx, "a.b.c"); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("garbage: error = %v, want errs.ErrInvalidToken", err)
	}
}

func TestNotListeningYet(t *testing.T) {
	a, _, _ := issuers(t)
	clock := newFakeClock()
	// Reserve an address, then close it: the verifier is built before the
	// local stack's JWKS endpoint listens.
	l := httptest.NewServer(a.JWKSHandler())
	url := l.URL
	l.Close()
	v := newTestVerifier(t, url, clock)
	tok := mint(t, a, "alice", localauth.IssuedAt(clock.now()))
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, errs.ErrKeysUnavailable) {
		t.Fatalf("nothing listening: error = %v, want errs.ErrKeysUnavailable", err)
	}
}

func TestKeySetCaching(t *testing.T) {
	a, _, _ := issuers(t)
	ctx := context.Background()

	t.Run("max-age honoured", func(t *testing.T) {
		srv := newJWKSServer(t, a)
		srv.setCacheControl("public, max-age=60, must-revalidate")
		clock := newFakeClock()
		v := newTestVerifier(t, srv.URL, clock)
		verify := func() {
			t.Helper()
			if _, err := v.Verify(ctx, mint(t, a, "alice", localauth.IssuedAt(clock.now()))); err != nil {
				t.Fatal(err)
			}
		}
		verify()
		clock.advance(59 * time.Second)
		verify()
		if n := srv.hits.Load(); n != 1 {
			t.Fatalf("fetches within max-age = %d, want 1", n)
		}
		clock.advance(time.Second)
		verify()
		if n := srv.hits.Load(); n != 2 {
			t.Fatalf("fetches after max-age = %d, want 2", n)
		}
	})

	t.Run("stale keys serve while the server is down", func(t *testing.T) {
		srv := newJWKSServer(t, a)
		srv.setCacheControl("max-age=60")
		clock := newFakeClock()
		v := newTestVerifier(t, srv.URL, clock)
		if _, err := v.Verify(ctx, mint(t, a, "alice", localauth.IssuedAt(clock.now()))); err != nil {
			t.Fatal(err)
		}
		srv.setDown(true)
		clock.advance(time.Minute + defaultKeySetPolicy.staleGrace/2)
		if _, err := v.Verify(ctx, mint(t, a, "alice", localauth.IssuedAt(clock.now()))); err != nil {
			t.Fatalf("stale within grace: %v", err)
		}
		clock.advance(defaultKeySetPolicy.staleGrace)
		if _, err := v.Verify(ctx, mint(t, a, "alice", localauth.IssuedAt(clock.now()))); !errors.Is(err, errs.ErrKeysUnavailable) {
			t.Fatalf("stale past grace: error = %v, want errs.ErrKeysUnavailable", err)
		}
		srv.setDown(false)
		clock.advance(defaultKeySetPolicy.retryInterval)
		if _, err := v.Verify(ctx, mint(t, a, "alice", localauth.IssuedAt(clock.now()))); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
	})

	t.Run("concurrent callers share one fetch", func(t *testing.T) {
		srv := newJWKSServer(t, a)
		srv.setDelay(50 * time.Millisecond)
		clock := newFakeClock()
		v := newTestVerifier(t, srv.URL, clock)
		tok := mint(t, a, "alice", localauth.IssuedAt(clock.now()))
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for range 20 {
			wg.Go(func() {
				_, err := v.Verify(ctx, tok)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Verify: %v", err)
			}
		}
		if n := srv.hits.Load(); n != 1 {
			t.Errorf("fetches = %d, want 1", n)
		}
	})

	t.Run("a cancelled caller does not fail the fetch", func(t *testing.T) {
		srv := newJWKSServer(t, a)
		srv.setDelay(100 * time.Millisecond)
		clock := newFakeClock()
		v := newTestVerifier(t, srv.URL, clock)
		tok := mint(t, a, "alice", localauth.IssuedAt(clock.now()))
		cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if _, err := v.Verify(cctx, tok); !errors.Is(err, errs.ErrKeysUnavailable) {
			t.Fatalf("cancelled: error = %v, want errs.ErrKeysUnavailable", err)
		}
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatalf("next caller: %v", err)
		}
		if n := srv.hits.Load(); n != 1 {
			t.Errorf("fetches = %d, want 1", n)
		}
	})
}

func TestKeySetTTL(t *testing.T) {
	p := defaultKeySetPolicy
	tests := []struct {
		cacheControl, age string
		want              time.Duration
	}{
		{"public, max-age=19204, must-revalidate, no-transform", "", 19204 * time.Second},
		{"max-age=60", "", time.Minute},
		{"max-age=60", "30", 30 * time.Second},
		{"max-age=60", "100", p.minTTL},
		{"", "", p.defaultTTL},
		{"max-age=abc", "", p.defaultTTL},
		{"max-age=-5", "", p.defaultTTL},
		{"max-age=0", "", p.minTTL},
		{"no-store", "", p.minTTL},
		{"max-age=600, no-cache", "", p.minTTL},
		{"MAX-AGE=120", "", 2 * time.Minute},
		{`max-age="120"`, "", 2 * time.Minute},
		{"max-age=99999999999999999", "", p.maxTTL},
		{"max-age=9223372036854775807", "", p.maxTTL},
	}
	s := &keySet{policy: p}
	for _, tt := range tests {
		h := http.Header{}
		h.Set("Cache-Control", tt.cacheControl)
		if tt.age != "" {
			h.Set("Age", tt.age)
		}
		if got := s.ttl(h); got != tt.want {
			t.Errorf("ttl(Cache-Control %q, Age %q) = %v, want %v", tt.cacheControl, tt.age, got, tt.want)
		}
	}
}
