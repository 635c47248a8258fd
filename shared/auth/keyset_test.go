package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/MicahParks/jwkset"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/errs"
)

func publicJWK(t *testing.T, key any, kid string, alg jwkset.ALG, use jwkset.USE) jwkset.JWKMarshal {
	t.Helper()
	jwk, err := jwkset.NewJWKFromKey(key, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: alg, USE: use}})
	if err != nil {
		t.Fatalf("NewJWKFromKey(%s): %v", kid, err)
	}
	return jwk.Marshal()
}

func TestKeySetParse(t *testing.T) {
	a, _, _ := issuers(t)
	var published jwkset.JWKSMarshal
	if err := json.Unmarshal(a.JWKS(), &published); err != nil {
		t.Fatal(err)
	}
	good := published.Keys[0]
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	noAlgNoUse := good
	noAlgNoUse.KID, noAlgNoUse.ALG, noAlgNoUse.USE = "bare", "", ""
	noKID := good
	noKID.KID = ""
	badN := good
	badN.KID, badN.N = "bad-n", "!!!"
	withPrivate := publicJWK(t, a.PrivateKey(), "with-private", jwkset.AlgRS256, jwkset.UseSig)
	withPrivate.D = "AQAB" // ignored: only the public part is read

	tests := []struct {
		name     string
		keys     []jwkset.JWKMarshal
		wantKIDs []string
		wantErr  bool
	}{
		{name: "one good key", keys: []jwkset.JWKMarshal{good}, wantKIDs: []string{good.KID}},
		{name: "alg and use optional", keys: []jwkset.JWKMarshal{noAlgNoUse}, wantKIDs: []string{"bare"}},
		{name: "private parameters ignored", keys: []jwkset.JWKMarshal{withPrivate}, wantKIDs: []string{"with-private"}},
		{
			name: "odd keys skipped",
			keys: []jwkset.JWKMarshal{
				publicJWK(t, &ec.PublicKey, "ec", jwkset.AlgES256, jwkset.UseSig),
				publicJWK(t, &small.PublicKey, "small", jwkset.AlgRS256, jwkset.UseSig),
				publicJWK(t, &a.PrivateKey().PublicKey, "rs512", jwkset.AlgRS512, jwkset.UseSig),
				publicJWK(t, &a.PrivateKey().PublicKey, "enc", jwkset.AlgRS256, jwkset.UseEnc),
				noKID, badN, good,
			},
			wantKIDs: []string{good.KID},
		},
		{name: "no usable key", keys: []jwkset.JWKMarshal{publicJWK(t, &small.PublicKey, "small", "", "")}, wantErr: true},
		{name: "empty set", keys: nil, wantErr: true},
	}
	s := &keySet{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(jwkset.JWKSMarshal{Keys: tt.keys})
			if err != nil {
				t.Fatal(err)
			}
			keys, err := s.parse(context.Background(), body)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parse() error = %v, wantErr %v", err, tt.wantErr)
			}
			var kids []string
			for kid, k := range keys {
				kids = append(kids, kid)
				if !k.Equal(&a.PrivateKey().PublicKey) {
					t.Errorf("key %q is not the issuer's public key", kid)
				}
			}
			slices.Sort(kids)
			if d := cmp.Diff(tt.wantKIDs, kids); d != "" {
				t.Errorf("kids (-want +got):\n%s", d)
			}
		})
	}
}

func TestKeySetBadResponses(t *testing.T) {
	a, _, _ := issuers(t)
	for _, body := range []string{"", "not json", `{"keys":[]}`, `{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"x"}]}`} {
		t.Run(body, func(t *testing.T) {
			srv := newJWKSServer(t, a)
			srv.setBody([]byte(body))
			clock := newFakeClock()
			v := newTestVerifier(t, srv.URL, clock)
			_, err := v.Verify(context.Background(), mint(t, a, "alice", localauth.IssuedAt(clock.now())))
			if !errors.Is(err, errs.ErrKeysUnavailable) {
				t.Fatalf("error = %v, want errs.ErrKeysUnavailable", err)
			}
		})
	}
}
