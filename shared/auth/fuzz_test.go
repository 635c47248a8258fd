package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/videngage/engagement/shared/errs"
)

// FuzzVerify checks that Verify never panics, that every error is an invalid
// token (the key set is always up here), and that the only tokens it accepts
// are the ones minted by the published key in this process, byte for byte.
// Seeds: the f.Add calls below and testdata/fuzz/FuzzVerify.
// Run longer with: go test -run '^$' -fuzz FuzzVerify -fuzztime 60s ./shared/auth/
func FuzzVerify(f *testing.F) {
	a, other, _ := issuers(f)
	srv := newJWKSServer(f, a)
	clock := newFakeClock()
	v := newTestVerifier(f, srv.URL, clock)
	now := clock.now()

	minted := map[string]User{}
	add := func(u User, opts ...localauth.MintOption) {
		tok := mint(f, a, u.ID, append([]localauth.MintOption{localauth.IssuedAt(now)}, opts...)...)
		minted[tok] = u
		f.Add(tok)
	}
	add(User{ID: "alice"})
	add(User{ID: "mod", Moderator: true}, localauth.Moderator())
	add(User{ID: strings.Repeat("é", maxUIDLen)})
	for _, opts := range [][]localauth.MintOption{
		{localauth.AlgNone()},
		{localauth.HS256WithPublicKey()},
		{localauth.SignWith(other)},
		{localauth.KeyID(other.KeyID()), localauth.SignWith(other)},
		{localauth.Audience("other")},
		{localauth.IssuedAt(now.Add(-3 * time.Hour))},
	} {
		f.Add(mint(f, a, "alice", append([]localauth.MintOption{localauth.IssuedAt(now)}, opts...)...))
	}
	f.Add(mint(f, a, "", localauth.IssuedAt(now)))
	f.Add("")
	f.Add("Bearer x")

	f.Fuzz(func(t *testing.T, raw string) {
		u, err := v.Verify(context.Background(), raw)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalidToken) || errors.Is(err, errs.ErrKeysUnavailable) {
				t.Fatalf("Verify(%q) error = %v, want errs.ErrInvalidToken only", raw, err)
			}
			if u != (User{}) {
				t.Fatalf("Verify(%q) = %+v with error %v", raw, u, err)
			}
			return
		}
		want, ok := minted[raw]
		if !ok {
			t.Fatalf("Verify accepted a token this test did not mint: %q -> %+v", raw, u)
		}
		if u != want {
			t.Fatalf("Verify(%q) = %+v, want %+v", raw, u, want)
		}
	})
}
