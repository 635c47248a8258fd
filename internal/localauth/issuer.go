// Package localauth mints Firebase-shaped ID tokens for the local stack and
// the tests: an Issuer with its own key, its key set, and options that mint
// bad tokens (alg none, HS256 with the public key, wrong audience, ...). It
// lives outside shared/ so that no deployed function links it;
// internal/layout's test holds that.
package localauth

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
)

const (
	localKeyBits    = 2048
	localTokenTTL   = time.Hour
	localJWKSMaxAge = 300 // seconds
	// maxUIDLen is Firebase's limit on a uid, in characters.
	maxUIDLen = 128
)

// Issuer mints RS256 tokens shaped like Firebase ID tokens with a key it
// generated, and publishes that key as a JWKS. The local stack and tests use
// it in place of Firebase Auth.
type Issuer struct {
	audience string
	key      *rsa.PrivateKey
	kid      string
	jwks     []byte
	now      func() time.Time

	mu sync.Mutex
	// created are the accounts' creation times that AccountCreated gave,
	// which AccountsHandler answers as the identity provider's records.
	created map[string]time.Time
}

// New generates a 2048-bit RSA key for tokens of the given
// audience (the Firebase project id).
func New(audience string) (*Issuer, error) {
	if audience == "" {
		return nil, errors.New("localauth.New: empty audience")
	}
	key, err := rsa.GenerateKey(rand.Reader, localKeyBits)
	if err != nil {
		return nil, fmt.Errorf("localauth.New: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("localauth.New: %w", err)
	}
	sum := sha256.Sum256(der)
	kid := "local-" + base64.RawURLEncoding.EncodeToString(sum[:12])
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{
		Metadata: jwkset.JWKMetadataOptions{ALG: jwkset.AlgRS256, KID: kid, USE: jwkset.UseSig},
	})
	if err != nil {
		return nil, fmt.Errorf("localauth.New: %w", err)
	}
	jwks, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	if err != nil {
		return nil, fmt.Errorf("localauth.New: %w", err)
	}
	return &Issuer{audience: audience, key: key, kid: kid, jwks: jwks, now: time.Now, created: map[string]time.Time{}}, nil
}

// Issuer is the iss of the tokens, as Firebase would set it.
func (i *Issuer) Issuer() string {
	return "https://securetoken.google.com/" + i.audience
}

// KeyID is the kid of the issuer's key.
func (i *Issuer) KeyID() string { return i.kid }

// PrivateKey is the issuer's signing key, for tests that build key sets.
func (i *Issuer) PrivateKey() *rsa.PrivateKey { return i.key }

// JWKS is the public key set as JSON.
func (i *Issuer) JWKS() []byte { return append([]byte(nil), i.jwks...) }

type mintOptions struct {
	moderator bool
	issuedAt  time.Time
	expiresAt time.Time
	audience  string
	issuer    string
	kid       string
	signWith  *Issuer
	alg       string // "RS256", "none" or "HS256"
	provider  string
	email     string // "" for none
	verified  bool
	tenant    string
	extra     map[string]any
	created   time.Time
}

// MintOption changes a minted token; most exist to mint bad tokens in tests.
type MintOption func(*mintOptions)

// Moderator adds the custom claim "moderator": true.
func Moderator() MintOption { return func(o *mintOptions) { o.moderator = true } }

// IssuedAt sets iat and auth_time (default now); exp follows one hour later
// unless ExpiresAt is given.
func IssuedAt(t time.Time) MintOption { return func(o *mintOptions) { o.issuedAt = t } }

// ExpiresAt sets exp.
func ExpiresAt(t time.Time) MintOption { return func(o *mintOptions) { o.expiresAt = t } }

// Audience sets aud.
func Audience(aud string) MintOption { return func(o *mintOptions) { o.audience = aud } }

// Iss sets iss.
func Iss(iss string) MintOption { return func(o *mintOptions) { o.issuer = iss } }

// KeyID sets the header's kid.
func KeyID(kid string) MintOption { return func(o *mintOptions) { o.kid = kid } }

// SignWith signs with other's key while naming this issuer's kid: a token
// whose signature does not match the published key.
func SignWith(other *Issuer) MintOption { return func(o *mintOptions) { o.signWith = other } }

// AlgNone mints an unsigned token with "alg": "none".
func AlgNone() MintOption { return func(o *mintOptions) { o.alg = "none" } }

// HS256WithPublicKey mints an HS256 token whose HMAC secret is the issuer's
// public key in PEM: the algorithm-confusion attack on RS256 verifiers.
func HS256WithPublicKey() MintOption { return func(o *mintOptions) { o.alg = "HS256" } }

// SignInProvider sets firebase.sign_in_provider (default "password"). For
// any other provider it drops the e-mail address; an Email after it sets one.
func SignInProvider(p string) MintOption {
	return func(o *mintOptions) {
		o.provider = p
		if p != "password" {
			o.email = ""
		}
	}
}

// Email sets the e-mail address ("" for none) and email_verified.
func Email(addr string, verified bool) MintOption {
	return func(o *mintOptions) { o.email, o.verified = addr, verified }
}

// Tenant sets firebase.tenant (default none).
func Tenant(t string) MintOption { return func(o *mintOptions) { o.tenant = t } }

// AccountCreated records that the account was created at t: the issuer's
// account records (AccountsHandler) answer it from then on, as Identity
// Platform's do. The token itself does not carry it, as Firebase's does not.
func AccountCreated(t time.Time) MintOption { return func(o *mintOptions) { o.created = t } }

// Claim sets (or, with a nil value, removes) any claim.
func Claim(name string, value any) MintOption {
	return func(o *mintOptions) {
		if o.extra == nil {
			o.extra = map[string]any{}
		}
		o.extra[name] = value
	}
}

// Mint returns a signed token for uid. By default it is the token of an
// e-mail and password account whose address is verified, the kind the
// verifier accepts by default. It does not validate uid, so that tests can
// mint tokens with an empty or overlong sub.
func (i *Issuer) Mint(uid string, opts ...MintOption) (string, error) {
	o := mintOptions{
		issuedAt: i.now(),
		audience: i.audience,
		issuer:   i.Issuer(),
		kid:      i.kid,
		signWith: i,
		alg:      jwt.SigningMethodRS256.Alg(),
		provider: "password",
		email:    url.QueryEscape(uid) + "@local.invalid",
		verified: true,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.created.IsZero() {
		i.mu.Lock()
		i.created[uid] = o.created
		i.mu.Unlock()
	}
	if o.expiresAt.IsZero() {
		o.expiresAt = o.issuedAt.Add(localTokenTTL)
	}
	c := jwt.MapClaims{
		"iss":       o.issuer,
		"aud":       o.audience,
		"auth_time": o.issuedAt.Unix(),
		"user_id":   uid,
		"sub":       uid,
		"iat":       o.issuedAt.Unix(),
		"exp":       o.expiresAt.Unix(),
	}
	fb := map[string]any{
		"identities":       map[string]any{},
		"sign_in_provider": o.provider,
	}
	if o.email != "" {
		c["email"] = o.email
		c["email_verified"] = o.verified
		fb["identities"] = map[string]any{"email": []string{o.email}}
	}
	if o.tenant != "" {
		fb["tenant"] = o.tenant
	}
	c["firebase"] = fb
	if o.moderator {
		c["moderator"] = true
	}
	for name, value := range o.extra {
		if value == nil {
			delete(c, name)
		} else {
			c[name] = value
		}
	}

	var (
		t   *jwt.Token
		key any
	)
	switch o.alg {
	case "none":
		t, key = jwt.NewWithClaims(jwt.SigningMethodNone, c), jwt.UnsafeAllowNoneSignatureType
	case "HS256":
		der, err := x509.MarshalPKIXPublicKey(&i.key.PublicKey)
		if err != nil {
			return "", fmt.Errorf("localauth.Mint: %w", err)
		}
		t, key = jwt.NewWithClaims(jwt.SigningMethodHS256, c), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	default:
		t, key = jwt.NewWithClaims(jwt.SigningMethodRS256, c), o.signWith.key
	}
	t.Header["kid"] = o.kid
	s, err := t.SignedString(key)
	if err != nil {
		return "", fmt.Errorf("localauth.Mint: %w", err)
	}
	return s, nil
}

// JWKSHandler serves the public key set.
func (i *Issuer) JWKSHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeLocalError(w, http.StatusMethodNotAllowed, "INVALID_ARGUMENT", "use GET")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(localJWKSMaxAge))
		w.Write(i.jwks)
	})
}

// AccountsHandler answers the Identity Toolkit API's accounts:lookup
// (POST {"localId":[…]}) as Identity Platform does, from the creation times
// AccountCreated recorded; an account minted without one is left out, as
// the provider leaves out accounts it does not know. Serve it at
// /identitytoolkit.googleapis.com/v1/projects/{project}/accounts:lookup of
// the host that FIREBASE_AUTH_EMULATOR_HOST names.
func (i *Issuer) AccountsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeLocalError(w, http.StatusMethodNotAllowed, "INVALID_ARGUMENT", "use POST")
			return
		}
		var body struct {
			LocalID []string `json:"localId"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
			writeLocalError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "the body must be {\"localId\":[…]}")
			return
		}
		type user struct {
			LocalID   string `json:"localId"`
			CreatedAt string `json:"createdAt"` // milliseconds since the epoch
		}
		users := []user{}
		i.mu.Lock()
		for _, uid := range body.LocalID {
			if t, ok := i.created[uid]; ok {
				users = append(users, user{uid, strconv.FormatInt(t.UnixMilli(), 10)})
			}
		}
		i.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"users": users})
	})
}

// AccountDeleteHandler answers the Identity Toolkit API's accounts:delete
// (POST {"localId":"…"}) as Identity Platform does: the account is
// forgotten (a later accounts:lookup leaves it out) and the answer is 200;
// an account it does not know is 400 USER_NOT_FOUND. Serve it at
// /identitytoolkit.googleapis.com/v1/projects/{project}/accounts:delete,
// beside AccountsHandler.
func (i *Issuer) AccountDeleteHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeLocalError(w, http.StatusMethodNotAllowed, "INVALID_ARGUMENT", "use POST")
			return
		}
		var body struct {
			LocalID string `json:"localId"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil || body.LocalID == "" {
			writeLocalError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "MISSING_LOCAL_ID: the body must be {\"localId\":\"…\"}")
			return
		}
		i.mu.Lock()
		_, ok := i.created[body.LocalID]
		delete(i.created, body.LocalID)
		i.mu.Unlock()
		if !ok {
			writeLocalError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "USER_NOT_FOUND")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"kind": "identitytoolkit#DeleteAccountResponse"})
	})
}

// TokenHandler answers GET ?uid=alice[&moderator=true][&accountAge=1h] with
// {"idToken":"…"}; accountAge (a Go duration) records the account as
// created that long ago (AccountCreated). Its errors are the API's own
// (httpx), reasons included; the stand-ins for Google's services answer as
// those do.
func (i *Issuer) TokenHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			httpx.WriteError(w, r, httpx.MethodNotAllowed(http.MethodGet))
			return
		}
		q := r.URL.Query()
		uid := q.Get("uid")
		switch {
		case uid == "":
			httpx.WriteError(w, r, httpx.InvalidField(errs.MissingField, "uid", "uid is required"))
			return
		case !utf8.ValidString(uid):
			httpx.WriteError(w, r, httpx.InvalidField(errs.InvalidValue, "uid", "uid must be valid UTF-8"))
			return
		case utf8.RuneCountInString(uid) > maxUIDLen:
			httpx.WriteError(w, r, httpx.InvalidField(errs.InvalidValue, "uid", "uid must be at most %d characters", maxUIDLen))
			return
		}
		var opts []MintOption
		switch q.Get("moderator") {
		case "", "false":
		case "true":
			opts = append(opts, Moderator())
		default:
			httpx.WriteError(w, r, httpx.InvalidField(errs.InvalidValue, "moderator", `moderator must be "true" or "false"`))
			return
		}
		if v := q.Get("accountAge"); v != "" {
			age, err := time.ParseDuration(v)
			if err != nil || age < 0 {
				httpx.WriteError(w, r, httpx.InvalidField(errs.InvalidValue, "accountAge", `accountAge must be a duration such as "1h" or "48h"`))
				return
			}
			opts = append(opts, AccountCreated(i.now().Add(-age)))
		}
		tok, err := i.Mint(uid, opts...)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(map[string]string{"idToken": tok})
	})
}

func writeLocalError(w http.ResponseWriter, code int, status, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"code": code, "status": status, "message": msg},
	})
}
