package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
)

func TestTokenCacheRemembersAVerifiedToken(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	tok := mint(t, a, "alice", localauth.IssuedAt(clock.now()), localauth.Moderator())
	for i := range 3 {
		u, err := v.Verify(context.Background(), tok)
		if err != nil || u != (User{ID: "alice", Moderator: true}) {
			t.Fatalf("verify %d: %+v, %v", i, u, err)
		}
	}
	if n := v.cache.Len(); n != 1 {
		t.Fatalf("%d cached tokens, want 1", n)
	}
	// A failed verification is not remembered.
	if _, err := v.Verify(context.Background(), tok+"x"); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("tampered token: %v, want errs.ErrInvalidToken", err)
	}
	if n := v.cache.Len(); n != 1 {
		t.Fatalf("%d cached tokens after a refusal, want 1", n)
	}
}

// A cached token whose signing key has left the key set is refused once the
// key set is refreshed, exactly as an uncached one.
func TestTokenCacheRefusesARevokedKey(t *testing.T) {
	a, b, _ := issuers(t)
	srv := newJWKSServer(t, a, b)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	ctx := context.Background()
	tok := mint(t, a, "alice", localauth.IssuedAt(clock.now()))
	other := mint(t, b, "bob", localauth.IssuedAt(clock.now()))
	for _, tk := range []string{tok, other} {
		if _, err := v.Verify(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	srv.serve(t, b) // a is revoked
	clock.advance(defaultKeySetPolicy.defaultTTL + time.Second)
	if _, err := v.Verify(ctx, tok); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("cached token of a revoked key: error = %v, want errs.ErrInvalidToken", err)
	}
	if _, err := v.Verify(ctx, other); err != nil {
		t.Fatalf("cached token of a kept key: %v", err)
	}
}

// A cached token is refused once expired (beyond the leeway, as uncached).
func TestTokenCacheRefusesAnExpiredToken(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock)
	ctx := context.Background()
	tok := mint(t, a, "alice", localauth.IssuedAt(clock.now().Add(-time.Hour)), localauth.ExpiresAt(clock.now().Add(time.Second)))
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Second)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatalf("expired within the leeway: %v", err)
	}
	clock.advance(leeway)
	if _, err := v.Verify(ctx, tok); !errors.Is(err, errs.ErrInvalidToken) {
		t.Fatalf("expired token: error = %v, want errs.ErrInvalidToken", err)
	}
}

func TestTokenCacheIsBounded(t *testing.T) {
	a, _, _ := issuers(t)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v := newTestVerifier(t, srv.URL, clock, WithTokenCache(3))
	for i := range 10 {
		if _, err := v.Verify(context.Background(), mint(t, a, "u"+string(rune('a'+i)), localauth.IssuedAt(clock.now()))); err != nil {
			t.Fatal(err)
		}
		if n := v.cache.Len(); n > 3 {
			t.Fatalf("%d cached tokens, want at most 3", n)
		}
	}
	off := newTestVerifier(t, srv.URL, clock, WithTokenCache(0))
	if _, err := off.Verify(context.Background(), mint(t, a, "alice", localauth.IssuedAt(clock.now()))); err != nil || off.cache != nil {
		t.Fatalf("cache off: %v, cache %v", err, off.cache)
	}
}

// BenchmarkVerify compares a token verified with RSA every time with one
// remembered by the cache.
func BenchmarkVerify(b *testing.B) {
	a, _, _ := issuers(b)
	srv := newJWKSServer(b, a)
	clock := newFakeClock()
	for _, bc := range []struct {
		name string
		size int
	}{{"rsa-every-time", 0}, {"cached", config.Defaults().Auth.TokenCache}} {
		b.Run(bc.name, func(b *testing.B) {
			v := newTestVerifier(b, srv.URL, clock, WithTokenCache(bc.size))
			tok := mint(b, a, "alice", localauth.IssuedAt(clock.now()))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(context.Background(), tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
