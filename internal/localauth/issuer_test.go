package localauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
)

const testAudience = "test-project"

// testIssuer is built once: keys are slow to generate under -race.
var testIssuer = sync.OnceValues(func() (*Issuer, error) { return New(testAudience) })

func issuer(t *testing.T) *Issuer {
	t.Helper()
	i, err := testIssuer()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return i
}

func mint(t *testing.T, i *Issuer, uid string, opts ...MintOption) string {
	t.Helper()
	tok, err := i.Mint(uid, opts...)
	if err != nil {
		t.Fatalf("Mint(%q): %v", uid, err)
	}
	return tok
}

// newVerifier is the production verifier reading the key set at jwksURL.
func newVerifier(t *testing.T, jwksURL string) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(context.Background(), config.Auth{Audience: testAudience, JWKSURL: jwksURL},
		auth.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func TestIssuerTokenShape(t *testing.T) {
	a := issuer(t)
	if got, want := a.Issuer(), "https://securetoken.google.com/"+testAudience; got != want {
		t.Errorf("Issuer() = %q, want %q", got, want)
	}
	iat := time.Unix(1_700_000_000, 0)
	tok := mint(t, a, "alice", IssuedAt(iat), Moderator())

	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	var header, payload map[string]any
	decode := func(s string, v any) {
		t.Helper()
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	decode(parts[0], &header)
	decode(parts[1], &payload)
	wantHeader := map[string]any{"alg": "RS256", "kid": a.KeyID(), "typ": "JWT"}
	if d := cmp.Diff(wantHeader, header); d != "" {
		t.Errorf("header (-want +got):\n%s", d)
	}
	wantPayload := map[string]any{
		"iss":       a.Issuer(),
		"aud":       testAudience,
		"auth_time": float64(iat.Unix()),
		"user_id":   "alice",
		"sub":       "alice",
		"iat":       float64(iat.Unix()),
		"exp":       float64(iat.Add(time.Hour).Unix()),
		// An e-mail and password account with a verified address, as
		// Firebase shapes its tokens: what the verifier accepts by default.
		"email":          "alice@local.invalid",
		"email_verified": true,
		"firebase": map[string]any{
			"identities":       map[string]any{"email": []any{"alice@local.invalid"}},
			"sign_in_provider": "password",
		},
		"moderator": true,
	}
	if d := cmp.Diff(wantPayload, payload); d != "" {
		t.Errorf("payload (-want +got):\n%s", d)
	}
}

func TestIssuerJWKSHandler(t *testing.T) {
	a := issuer(t)
	srv := httptest.NewServer(a.JWKSHandler())
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Cache-Control"); got != "public, max-age=300" {
		t.Errorf("Cache-Control = %q", got)
	}
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 1 {
		t.Fatalf("%d keys, want 1", len(set.Keys))
	}
	k := set.Keys[0]
	for name, want := range map[string]any{"kty": "RSA", "alg": "RS256", "use": "sig", "kid": a.KeyID(), "e": "AQAB"} {
		if k[name] != want {
			t.Errorf("key %s = %v, want %v", name, k[name], want)
		}
	}
	for _, private := range []string{"d", "p", "q", "dp", "dq", "qi"} {
		if _, ok := k[private]; ok {
			t.Errorf("published key holds private parameter %q", private)
		}
	}

	// The verifier reads the handler's key set directly.
	v := newVerifier(t, srv.URL)
	if _, err := v.Verify(context.Background(), mint(t, a, "alice")); err != nil {
		t.Errorf("Verify against JWKSHandler: %v", err)
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusMethodNotAllowed || resp2.Header.Get("Allow") == "" {
		t.Errorf("POST: status %d, Allow %q; want 405 with Allow", resp2.StatusCode, resp2.Header.Get("Allow"))
	}
}

func TestIssuerTokenHandler(t *testing.T) {
	a := issuer(t)
	jwks := httptest.NewServer(a.JWKSHandler())
	defer jwks.Close()
	v := newVerifier(t, jwks.URL)
	h := a.TokenHandler()

	tests := []struct {
		name       string
		method     string
		query      url.Values
		wantStatus int
		want       auth.User
		reason     errs.Reason
	}{
		{name: "user", query: url.Values{"uid": {"alice"}}, wantStatus: 200, want: auth.User{ID: "alice"}},
		{name: "moderator", query: url.Values{"uid": {"mod"}, "moderator": {"true"}}, wantStatus: 200, want: auth.User{ID: "mod", Moderator: true}},
		{name: "moderator false", query: url.Values{"uid": {"bob"}, "moderator": {"false"}}, wantStatus: 200, want: auth.User{ID: "bob"}},
		{name: "uid with odd characters", query: url.Values{"uid": {"a b/c?d&é"}}, wantStatus: 200, want: auth.User{ID: "a b/c?d&é"}},
		{name: "uid of 128 characters", query: url.Values{"uid": {strings.Repeat("u", 128)}}, wantStatus: 200, want: auth.User{ID: strings.Repeat("u", 128)}},
		{name: "missing uid", query: url.Values{}, wantStatus: 400, reason: errs.MissingField},
		{name: "empty uid", query: url.Values{"uid": {""}}, wantStatus: 400, reason: errs.MissingField},
		{name: "uid too long", query: url.Values{"uid": {strings.Repeat("u", 129)}}, wantStatus: 400, reason: errs.InvalidValue},
		{name: "uid not UTF-8", query: url.Values{"uid": {"\xff"}}, wantStatus: 400, reason: errs.InvalidValue},
		{name: "bad moderator", query: url.Values{"uid": {"alice"}, "moderator": {"yes"}}, wantStatus: 400, reason: errs.InvalidValue},
		{name: "bad accountAge", query: url.Values{"uid": {"alice"}, "accountAge": {"-1h"}}, wantStatus: 400, reason: errs.InvalidValue},
		{name: "POST", method: http.MethodPost, query: url.Values{"uid": {"alice"}}, wantStatus: 405, reason: errs.MethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			r := httptest.NewRequest(method, "/dev/token?"+tt.query.Encode(), nil)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if tt.wantStatus != http.StatusOK {
				apitest.CheckError(t, tt.name, apitest.Answer{Code: w.Code, Header: w.Header(), Body: w.Body.Bytes()}, tt.wantStatus, "INVALID_ARGUMENT", tt.reason)
				return
			}
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tt.wantStatus, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			var body struct {
				IDToken string `json:"idToken"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %s: %v", w.Body, err)
			}
			got, err := v.Verify(context.Background(), body.IDToken)
			if err != nil {
				t.Fatalf("Verify(minted token): %v", err)
			}
			if got != tt.want {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewEmptyAudience(t *testing.T) {
	if _, err := New(""); err == nil {
		t.Error("New(\"\") succeeded, want an error")
	}
}

// The issuer's account records answer, through auth's reader of the
// Firebase Auth emulator, the creation times its tokens were minted with:
// a young account and an old one; an account minted without one is left out.
func TestIssuerAccountRecords(t *testing.T) {
	i := issuer(t)
	mux := http.NewServeMux()
	mux.Handle("/identitytoolkit.googleapis.com/v1/projects/"+testAudience+"/accounts:lookup", i.AccountsHandler())
	mux.Handle("/dev/token", i.TokenHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	old := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)
	mint(t, i, "records-old", AccountCreated(old))
	mint(t, i, "records-unknown")
	res, err := http.Get(srv.URL + "/dev/token?uid=records-young&accountAge=2h")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /dev/token with accountAge: %v %v", res, err)
	}
	res.Body.Close()
	if res, err := http.Get(srv.URL + "/dev/token?uid=x&accountAge=soon"); err != nil || res.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /dev/token with a bad accountAge: %v %v", res, err)
	}

	cfg := config.Defaults()
	cfg.Auth.Audience = testAudience
	cfg.Auth.EmulatorHost = strings.TrimPrefix(srv.URL, "http://")
	records, err := auth.AccountRecordsOf(context.Background(), &cfg)
	if err != nil || records == nil {
		t.Fatalf("AccountRecordsOf: %v, %v", records, err)
	}
	got, err := records.Created(context.Background(), []string{"records-old", "records-young", "records-unknown"})
	if err != nil {
		t.Fatal(err)
	}
	if !got["records-old"].Equal(old) {
		t.Errorf("old account created %v, want %v", got["records-old"], old)
	}
	if age := time.Since(got["records-young"]); age < 2*time.Hour || age > 2*time.Hour+time.Minute {
		t.Errorf("young account is %v old, want 2h", age)
	}
	if _, ok := got["records-unknown"]; ok || len(got) != 2 {
		t.Errorf("records %v: want the two accounts minted with a creation time", got)
	}
}

// The issuer answers accounts:delete through auth's reader as Identity
// Platform does: the account is forgotten, so a later lookup leaves it out;
// deleting it again, or an account never known, counts as deleted; a
// request without an account is refused.
func TestIssuerAccountDelete(t *testing.T) {
	i := issuer(t)
	mux := http.NewServeMux()
	accounts := "/identitytoolkit.googleapis.com/v1/projects/" + testAudience + "/accounts"
	mux.Handle(accounts+":lookup", i.AccountsHandler())
	mux.Handle(accounts+":delete", i.AccountDeleteHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	created := time.Date(2021, 1, 2, 3, 4, 5, 0, time.UTC)
	mint(t, i, "delete-me", AccountCreated(created))
	mint(t, i, "keep-me", AccountCreated(created))

	cfg := config.Defaults()
	cfg.Auth.Audience = testAudience
	cfg.Auth.EmulatorHost = strings.TrimPrefix(srv.URL, "http://")
	records, err := auth.AccountRecordsOf(context.Background(), &cfg)
	if err != nil || records == nil {
		t.Fatalf("AccountRecordsOf: %v, %v", records, err)
	}
	ctx := context.Background()
	for n := range 2 {
		if err := records.Delete(ctx, "delete-me"); err != nil {
			t.Fatalf("delete %d: %v", n+1, err)
		}
	}
	if err := records.Delete(ctx, "never-made"); err != nil {
		t.Errorf("delete of an unknown account: %v, want it counted as deleted", err)
	}
	got, err := records.Created(ctx, []string{"delete-me", "keep-me"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["delete-me"]; ok || !got["keep-me"].Equal(created) {
		t.Errorf("records after the delete %v: want keep-me only", got)
	}

	res, err := http.Post(srv.URL+accounts+":delete", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("delete without localId: %d, want 400", res.StatusCode)
	}
}
