package countsfn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	countsfn "github.com/videngage/engagement/functions/counts"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/session"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

const audience = "counts-test"

// RSA keys are slow to make under -race: one issuer serves every test.
var issuer = sync.OnceValues(func() (*localauth.Issuer, error) { return localauth.New(audience) })

// fakeStore answers from maps; down makes every read fail as Spanner does
// when it cannot be reached.
type fakeStore struct {
	mu        sync.Mutex
	counted   map[string]counter.Values
	pending   map[string]map[string]counter.Values // user → id → values
	reactions map[string]map[string]countstore.ViewerReaction
	down      atomic.Bool
	publics   atomic.Int64
	owns      atomic.Int64
}

func (f *fakeStore) Public(_ context.Context, ids []string, _ time.Duration) (countstore.Snapshot, error) {
	f.publics.Add(1)
	if f.down.Load() {
		return countstore.Snapshot{}, fmt.Errorf("countstore.Public: %w", status.Error(codes.Unavailable, "connection refused"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := countstore.Snapshot{Values: map[string]counter.Values{}, ReadTime: time.Now()}
	for _, id := range ids {
		if v, ok := f.counted[id]; ok {
			s.Values[id] = v
		}
	}
	return s, nil
}

func (f *fakeStore) OwnMany(_ context.Context, qs []countstore.OwnQuery) ([]countstore.Own, error) {
	f.owns.Add(1)
	if f.down.Load() {
		return nil, fmt.Errorf("countstore.Own: %w", status.Error(codes.Unavailable, "connection refused"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]countstore.Own, len(qs))
	for i, q := range qs {
		out[i] = f.own(q)
	}
	return out, nil
}

func (f *fakeStore) own(q countstore.OwnQuery) countstore.Own {
	o := countstore.Own{Fresh: map[string]counter.Values{}, Pending: map[string]counter.Values{}, Reactions: map[string]countstore.ViewerReaction{}, ReadTime: time.Now()}
	held := map[string]bool{}
	for _, id := range q.Cached {
		held[id] = true
	}
	for _, id := range q.IDs {
		if !held[id] {
			o.Fresh[id] = f.counted[id]
		}
		if v, ok := f.pending[q.Viewer][id]; ok {
			o.Pending[id] = v
		}
		if r, ok := f.reactions[q.Viewer][id]; ok {
			o.Reactions[id] = r
		}
	}
	return o
}

type env struct {
	t     *testing.T
	url   string
	alice string
}

// serve runs the handler as deployed: behind the standard middleware, with
// CORS for any origin, and the real token verifier.
func serve(t *testing.T, store countsfn.Store, d countsfn.Deps) *env {
	t.Helper()
	is, err := issuer()
	if err != nil {
		t.Fatal(err)
	}
	jwks := httptest.NewServer(is.JWKSHandler())
	t.Cleanup(jwks.Close)
	verifier, err := auth.NewVerifier(context.Background(), config.Auth{Audience: audience, JWKSURL: jwks.URL, TokenCache: config.Defaults().Auth.TokenCache})
	if err != nil {
		t.Fatal(err)
	}
	d.Verifier, d.Store = verifier, store
	h := httpx.Standard("Counts", "test", []string{"*"}, 5*time.Second)(countsfn.New(d))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	alice, err := is.Mint("alice")
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, url: srv.URL, alice: alice}
}

// get sends GET path from a browser's origin, with the header name/value
// pairs in hdr, and checks the answer against the document.
func (e *env) get(path string, hdr ...string) apitest.Answer {
	e.t.Helper()
	return apitest.Request(e.t, "GET", e.url+path, "", nil, append([]string{"Origin", "https://example.com"}, hdr...)...)
}

func newFake() *fakeStore {
	return &fakeStore{
		counted: map[string]counter.Values{"a": {Likes: 3, Views: 10}, "b": {Comments: 2}, "neg": {Likes: -1}},
		pending: map[string]map[string]counter.Values{"alice": {"a": {Likes: 1}}},
		reactions: map[string]map[string]countstore.ViewerReaction{
			"alice": {"a": {Reaction: "like", Version: 4}},
		},
	}
}

var deps = countsfn.Deps{MaxAge: 2 * time.Second, CacheTTL: time.Second}

// cdnCacheable checks a response against Cloud CDN's documented rules
// (https://cloud.google.com/cdn/docs/caching, "Cacheable content" and
// "Non-cacheable content"): stored only when it answers a GET with 200 (or
// 203, 300, 301, 302, 307, 410), has Cache-Control public and a max-age (or
// s-maxage, or Expires), a Content-Length or Transfer-Encoding, and none
// of: Set-Cookie, a Vary other than Accept, Accept-Encoding or Origin,
// Cache-Control no-store, no-cache or private. It returns the first rule
// the response breaks, "" when it may be cached.
func cdnCacheable(code int, h http.Header) string {
	switch code {
	case 200, 203, 300, 301, 302, 307, 410:
	default:
		return fmt.Sprintf("status %d", code)
	}
	directives := map[string]bool{}
	maxAge := false
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			d = strings.ToLower(strings.TrimSpace(d))
			name, _, _ := strings.Cut(d, "=")
			directives[name] = true
			if name == "max-age" || name == "s-maxage" {
				maxAge = true
			}
		}
	}
	switch {
	case !directives["public"]:
		return "no Cache-Control: public"
	case !maxAge && h.Get("Expires") == "":
		return "no max-age, s-maxage or Expires"
	case h.Get("Content-Length") == "" && h.Get("Transfer-Encoding") == "":
		return "neither Content-Length nor Transfer-Encoding"
	case len(h.Values("Set-Cookie")) > 0:
		return "Set-Cookie"
	case directives["no-store"] || directives["no-cache"] || directives["private"]:
		return "no-store, no-cache or private"
	}
	for _, v := range h.Values("Vary") {
		for _, name := range strings.Split(v, ",") {
			switch http.CanonicalHeaderKey(strings.TrimSpace(name)) {
			case "Accept", "Accept-Encoding", "Origin":
			default:
				return "Vary: " + strings.TrimSpace(name)
			}
		}
	}
	return ""
}

func TestPublicCounts(t *testing.T) {
	f := newFake()
	e := serve(t, f, deps)
	a := e.get("/v1/counts?ids=a,b,unknown,neg").Want(t, 200, "GET")
	var body map[string]json.RawMessage
	if err := json.Unmarshal(a.Body, &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["viewer"]; ok || len(body) != 1 {
		t.Errorf("public answer has %s, want counts only", a.Body)
	}
	var got countsfn.Body
	if err := json.Unmarshal(a.Body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]counter.Values{"a": {Likes: 3, Views: 10}, "b": {Comments: 2}, "unknown": {}, "neg": {}}
	if fmt.Sprint(got.Counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v (every id, never negative)", got.Counts, want)
	}
	if cc := a.Header.Get("Cache-Control"); cc != "public, max-age=2" {
		t.Errorf("Cache-Control %q, want public, max-age=2 (COUNTS_MAX_AGE, the spec's default)", cc)
	}
	if why := cdnCacheable(a.Code, a.Header); why != "" {
		t.Errorf("Cloud CDN would not cache the public answer: %s (headers %v)", why, a.Header)
	}
	etag := a.Header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
		t.Errorf("ETag %q, want a strong quoted tag", etag)
	}

	// Any Authorization header, valid, invalid or several, changes nothing.
	for _, auth := range [][]string{{"Authorization", "Bearer " + e.alice}, {"Authorization", "Bearer garbage"}, {"Authorization", "x", "Authorization", "y"}} {
		b := e.get("/v1/counts?ids=a,b,unknown,neg", auth...).Want(t, 200, "GET")
		if string(b.Body) != string(a.Body) || b.Header.Get("ETag") != etag || b.Header.Get("Cache-Control") != a.Header.Get("Cache-Control") {
			t.Errorf("with %v: %s %v, want the anonymous answer", auth, b.Body, b.Header)
		}
	}
	// The order of the ids does not change the answer or its tag (the
	// client follows the redirect to the canonical order).
	if b := e.get("/v1/counts?ids=neg,unknown,b,a,a").Want(t, 200, "GET"); b.Header.Get("ETag") != etag {
		t.Errorf("reordered ids: ETag %q, want %q", b.Header.Get("ETag"), etag)
	}
	// If-None-Match naming the tag: 304, no body, the same validators.
	for _, inm := range []string{etag, `"other", ` + etag, "W/" + etag, "*"} {
		b := e.get("/v1/counts?ids=a,b,unknown,neg", "If-None-Match", inm).Want(t, http.StatusNotModified, "GET")
		if len(b.Body) != 0 || b.Header.Get("ETag") != etag || b.Header.Get("Cache-Control") != "public, max-age=2" {
			t.Errorf("If-None-Match %s: body %q headers %v", inm, b.Body, b.Header)
		}
	}
	e.get("/v1/counts?ids=a,b,unknown,neg", "If-None-Match", `"other"`).Want(t, 200, "GET")

	// Held for the instance's TTL: a change shows on a later read.
	f.mu.Lock()
	f.counted["a"] = counter.Values{Likes: 4}
	f.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b := e.get("/v1/counts?ids=a,b,unknown,neg").Want(t, 200, "GET")
		if b.Header.Get("ETag") != etag {
			if !strings.Contains(string(b.Body), `"likes":4`) {
				t.Errorf("a new tag for %s", b.Body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a changed count never showed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The ids' order does not split the CDN's cache key (the ids parameter as
// sent): any spelling but the sorted one, each id once, is redirected to it
// with a cacheable 301; the canonical one is answered.
func TestPublicCountsRedirectToCanonicalIDs(t *testing.T) {
	f := newFake()
	e := serve(t, f, deps)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) apitest.Answer {
		t.Helper()
		req, err := http.NewRequest("GET", e.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if err := apitest.Check("GET", path, resp.StatusCode, resp.Header, b); err != nil {
			t.Error(err)
		}
		return apitest.Answer{Code: resp.StatusCode, Header: resp.Header, Body: b}
	}
	for q, want := range map[string]string{
		"ids=b,a":               "/v1/counts?ids=a,b",
		"ids=neg,unknown,b,a,a": "/v1/counts?ids=a,b,neg,unknown",
		"ids=a,a":               "/v1/counts?ids=a",
		"ids=a,b&x=1":           "/v1/counts?ids=a,b",
		"ids=B,a,_,-":           "/v1/counts?ids=-,B,_,a",
	} {
		if q == "ids=a,b&x=1" {
			// Other parameters are not part of the cache key: no redirect.
			get("/v1/counts?"+q).Want(t, 200, q)
			continue
		}
		a := get("/v1/counts?"+q).Want(t, http.StatusMovedPermanently, q)
		if got := a.Header.Get("Location"); got != want {
			t.Errorf("?%s: Location %q, want %q", q, got, want)
		}
		if why := cdnCacheable(a.Code, a.Header); why != "" {
			t.Errorf("?%s: Cloud CDN would not cache the redirect: %s (%v)", q, why, a.Header)
		}
	}
	// Other parameters are not part of the cache key: they are left alone.
	for _, q := range []string{"ids=a,b", "ids=a%2Cb", "ids=a", "ids=-,B,_,a", "ids=a,b&x=1"} {
		get("/v1/counts?"+q).Want(t, 200, q)
	}
	// The caller's own view is never cached: its order is left as sent.
	e.get("/v1/me/counts?ids=b,a", "Authorization", "Bearer "+e.alice).Want(t, 200, "GET /v1/me/counts")
}

func TestMyCounts(t *testing.T) {
	f := newFake()
	e := serve(t, f, deps)
	e.get("/v1/counts?ids=a,b").Want(t, 200, "GET") // the instance now holds a and b
	a := e.get("/v1/me/counts?ids=a,b", "Authorization", "Bearer "+e.alice).Want(t, 200, "GET")
	var got countsfn.Body
	if err := json.Unmarshal(a.Body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Counts["a"].Likes != 4 || got.Counts["b"].Comments != 2 {
		t.Errorf("alice's counts %v, want a 3 likes + her pending 1", got.Counts)
	}
	if got.Viewer == nil || got.Viewer.Reactions["a"] != (countsfn.ReactionBody{Reaction: "like", Version: 4}) ||
		got.Viewer.Reactions["b"] != (countsfn.ReactionBody{Reaction: "none"}) {
		t.Errorf("viewer %s", a.Body)
	}
	if cc := a.Header.Get("Cache-Control"); cc != "private, no-store" {
		t.Errorf("Cache-Control %q, want private, no-store", cc)
	}
	if why := cdnCacheable(a.Code, a.Header); why == "" {
		t.Error("Cloud CDN would cache a personal answer")
	}
	etag := a.Header.Get("ETag")
	b := e.get("/v1/me/counts?ids=a,b", "Authorization", "Bearer "+e.alice, "If-None-Match", etag).Want(t, http.StatusNotModified, "GET")
	if b.Header.Get("Cache-Control") != "private, no-store" {
		t.Errorf("304 Cache-Control %q", b.Header.Get("Cache-Control"))
	}

	for _, c := range []struct {
		hdr    []string
		reason errs.Reason
	}{
		{nil, errs.TokenMissing},
		{[]string{"Authorization", "Bearer garbage"}, errs.TokenInvalid},
		{[]string{"Authorization", "Basic YWxpY2U6"}, errs.TokenMissing},
	} {
		r := e.get("/v1/me/counts?ids=a", c.hdr...)
		apitest.CheckError(t, fmt.Sprint(c.hdr), r, 401, "UNAUTHENTICATED", c.reason)
		if r.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%v: %v %s", c.hdr, r.Header, r.Body)
		}
	}
}

func TestBadIDs(t *testing.T) {
	e := serve(t, newFake(), deps)
	many := make([]string, 51)
	for i := range many {
		many[i] = fmt.Sprintf("i%d", i)
	}
	for _, c := range []struct {
		query  string
		reason errs.Reason
	}{
		{"", errs.MissingField},
		{"?ids=", errs.MissingField},
		{"?ids=a/b", errs.InvalidID},
		{"?ids=a,,b", errs.InvalidID},
		{"?ids=" + strings.Join(many, ","), errs.InvalidValue},
		// One list, never answered for its first part alone.
		{"?ids=a&ids=b", errs.RepeatedParameter},
		{"?ids=a,b&ids=c", errs.RepeatedParameter},
		{"?ids=a&ids=a", errs.RepeatedParameter},
	} {
		for _, path := range []string{"/v1/counts", "/v1/me/counts"} {
			a := e.get(path+c.query, "Authorization", "Bearer "+e.alice)
			apitest.CheckError(t, path+c.query, a, 400, "INVALID_ARGUMENT", c.reason)
			if a.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("%s%s: %s %v", path, c.query, a.Body, a.Header)
			}
		}
	}
	// 50 distinct ids are allowed, repeats not counted twice.
	e.get("/v1/counts?ids="+strings.Join(many[:50], ",")+",i0", "").Want(t, 200, "GET")
}

func TestBackendDown(t *testing.T) {
	f := newFake()
	e := serve(t, f, deps)
	f.down.Store(true)
	for _, path := range []string{"/v1/counts?ids=a", "/v1/me/counts?ids=a"} {
		a := e.get(path, "Authorization", "Bearer "+e.alice)
		apitest.CheckError(t, path, a, http.StatusServiceUnavailable, "UNAVAILABLE", errs.BackendUnavailable)
		if a.Header.Get("Retry-After") == "" || a.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %v %s", path, a.Header, a.Body)
		}
		if why := cdnCacheable(a.Code, a.Header); why == "" {
			t.Errorf("%s: Cloud CDN would cache the error", path)
		}
	}
	// The failure was not held: back up, the next read answers.
	f.down.Store(false)
	e.get("/v1/counts?ids=a").Want(t, 200, "GET")
}

// TestReadYourOwnWritesThroughTheCache runs the handler over the real store
// with the instance cache on: a viewer's like shows in the very next
// /v1/me/counts, once, while the public answer is still the held one, and
// stays exactly once as the like is counted and folded.
func TestReadYourOwnWritesThroughTheCache(t *testing.T) {
	cfg := emulatortest.New(t)
	ctx := context.Background()
	db := emulatortest.Spanner(t, cfg)
	outbox, folds, cs := outboxstore.New(db), foldstore.New(db, foldstore.Options{}), countstore.New(db)
	if _, err := outbox.Apply(ctx, []events.Event{{ID: "seed", Kind: events.KindCounterDelta, Deltas: counter.Deltas("v", counter.Values{Likes: 5})}}); err != nil {
		t.Fatal(err)
	}
	if _, err := folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	// A long TTL: the public answer stays the held one for the whole test.
	e := serve(t, cs, countsfn.Deps{MaxAge: time.Hour, CacheTTL: time.Hour})
	is, _ := issuer()
	bob, err := is.Mint("bob")
	if err != nil {
		t.Fatal(err)
	}
	likes := func(path, token string) int64 {
		t.Helper()
		var hdr []string
		if token != "" {
			hdr = []string{"Authorization", "Bearer " + token}
		}
		var b countsfn.Body
		if err := json.Unmarshal(e.get(path+"?ids=v,w", hdr...).Want(t, 200, "GET").Body, &b); err != nil {
			t.Fatal(err)
		}
		return b.Counts["v"].Likes
	}
	if n := likes("/v1/counts", ""); n != 5 {
		t.Fatalf("public: %d likes, want 5", n)
	}
	like := events.Event{ID: "alice-like", Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas("v", counter.Values{Likes: 1})}
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(outboxstore.Pending(like, "alice"))
	}); err != nil {
		t.Fatal(err)
	}
	check := func(step string, bobWants int64) {
		t.Helper()
		if n := likes("/v1/me/counts", e.alice); n != 6 {
			t.Errorf("%s: alice sees %d likes, want 6 (her like once)", step, n)
		}
		if n := likes("/v1/me/counts", bob); n != bobWants {
			t.Errorf("%s: bob sees %d likes, want %d", step, n, bobWants)
		}
		if n := likes("/v1/counts", ""); n != 5 {
			t.Errorf("%s: public %d likes, want the held 5", step, n)
		}
	}
	check("pending", 5)
	if _, err := outbox.Apply(ctx, []events.Event{like}); err != nil {
		t.Fatal(err)
	}
	check("counted", 6)
	if _, err := folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	check("folded", 6)
}

// TestSignedInReadFillsTheCache: the ids a signed-in read did not hold were
// read whole, so the instance holds them: the next read of them, signed in
// or not, asks Spanner for no public value.
func TestSignedInReadFillsTheCache(t *testing.T) {
	f := newFake()
	e := serve(t, f, deps)
	e.get("/v1/me/counts?ids=a,b", "Authorization", "Bearer "+e.alice).Want(t, 200, "GET")
	a := e.get("/v1/counts?ids=a,b").Want(t, 200, "GET")
	if n := f.publics.Load(); n != 0 {
		t.Errorf("%d public reads after a signed-in read of the same ids, want 0", n)
	}
	var got countsfn.Body
	if err := json.Unmarshal(a.Body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Counts["a"].Likes != 3 || got.Counts["b"].Comments != 2 {
		t.Errorf("public counts %v, want a 3 likes (not alice's pending one), b 2 comments", got.Counts)
	}
}

// headerVerifier takes the caller's id from "Authorization: Bearer <uid>":
// TestSignedInReadsTogether runs the handler in a synctest bubble, without
// the network the real verifier (every other test's) fetches its keys over.
type headerVerifier struct{}

func (headerVerifier) FromRequest(r *http.Request) (auth.User, error) {
	uid, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return auth.User{ID: uid}, nil
}

// gatedStore holds its first OwnMany call until release is closed and
// records the viewers of every call, and which calls read strongly (a query
// names no timestamp) and which at a timestamp, as countstore.OwnMany does.
type gatedStore struct {
	*fakeStore
	release chan struct{}
	mu      sync.Mutex
	calls   [][]string
	queries [][]countstore.OwnQuery
	// strongCalls and timestampedCalls count the calls of each kind, and
	// tokenReadStrongly the queries that name a timestamp in strong calls.
	strongCalls, timestampedCalls, tokenReadStrongly int
}

func (g *gatedStore) OwnMany(ctx context.Context, qs []countstore.OwnQuery) ([]countstore.Own, error) {
	var viewers []string
	strong, named := false, 0
	for _, q := range qs {
		viewers = append(viewers, q.Viewer)
		if q.At.IsZero() {
			strong = true
		} else {
			named++
		}
	}
	g.mu.Lock()
	g.calls = append(g.calls, viewers)
	g.queries = append(g.queries, qs)
	if strong {
		g.strongCalls++
		g.tokenReadStrongly += named
	} else {
		g.timestampedCalls++
	}
	first := len(g.calls) == 1
	g.mu.Unlock()
	if first {
		<-g.release
	}
	return g.fakeStore.OwnMany(ctx, qs)
}

// TestSignedInReadsTogether: while one signed-in read runs, the signed-in
// requests that arrive wait and are read together in the next one, and each
// caller gets their own reactions and pending changes back.
func TestSignedInReadsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		users := make([]string, 10)
		for i := range users {
			users[i] = fmt.Sprintf("user-%d", i)
			f.reactions[users[i]] = map[string]countstore.ViewerReaction{"a": {Reaction: "like", Version: int64(i + 1)}}
			f.pending[users[i]] = map[string]counter.Values{"a": {Likes: int64(i)}}
		}
		g := &gatedStore{fakeStore: f, release: make(chan struct{})}
		h := countsfn.New(countsfn.Deps{Verifier: headerVerifier{}, Store: g, MaxAge: 2 * time.Second, OwnInFlight: 1})
		answers := make([]*httptest.ResponseRecorder, len(users))
		var wg sync.WaitGroup
		read := func(i int) {
			wg.Go(func() {
				r := httptest.NewRequest("GET", "/v1/me/counts?ids=a,b", nil)
				r.Header.Set("Authorization", "Bearer "+users[i])
				answers[i] = httptest.NewRecorder()
				h.ServeHTTP(answers[i], r)
			})
		}
		read(0)
		synctest.Wait() // the first read runs and holds
		for i := 1; i < len(users); i++ {
			read(i)
		}
		synctest.Wait() // the others wait behind it
		close(g.release)
		wg.Wait()

		if len(g.calls) != 2 || len(g.calls[0]) != 1 || len(g.calls[1]) != len(users)-1 {
			t.Errorf("store calls %v, want the first request alone, then the other %d together", g.calls, len(users)-1)
		}
		for i, a := range answers {
			var got countsfn.Body
			if err := json.Unmarshal(a.Body.Bytes(), &got); err != nil || a.Code != 200 {
				t.Fatalf("%s: %d %s", users[i], a.Code, a.Body)
			}
			if got.Counts["a"].Likes != 3+int64(i) || got.Viewer.Reactions["a"].Version != int64(i+1) {
				t.Errorf("%s got %s, want a 3 likes + their own %d, their reaction version %d", users[i], a.Body, i, i+1)
			}
		}
	})
}

// TestTokenReadsBatchApartFromStrongReads: signed-in requests with a
// Session-Token that wait for a read beside requests without one are read
// together at their timestamp, and those without strongly, in batches of
// their own: a tokened read never waits for a strong one's round trip to
// the leader. Every caller still gets their own rows.
func TestTokenReadsBatchApartFromStrongReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		users := make([]string, 7)
		for i := range users {
			users[i] = fmt.Sprintf("user-%d", i)
			f.reactions[users[i]] = map[string]countstore.ViewerReaction{"a": {Reaction: "like", Version: int64(i + 1)}}
		}
		g := &gatedStore{fakeStore: f, release: make(chan struct{})}
		h := countsfn.New(countsfn.Deps{Verifier: headerVerifier{}, Store: g, MaxAge: 2 * time.Second, MaxStaleness: time.Minute, OwnInFlight: 1})
		token := session.Encode(time.Now())
		answers := make([]*httptest.ResponseRecorder, len(users))
		var wg sync.WaitGroup
		read := func(i int) {
			wg.Go(func() {
				r := httptest.NewRequest("GET", "/v1/me/counts?ids=a", nil)
				r.Header.Set("Authorization", "Bearer "+users[i])
				if i%2 == 1 {
					r.Header.Set(session.Header, token)
				}
				answers[i] = httptest.NewRecorder()
				h.ServeHTTP(answers[i], r)
			})
		}
		read(0)
		synctest.Wait() // the first read (strong) runs and holds
		for i := 1; i < len(users); i++ {
			read(i) // with a token and without, in turn
		}
		synctest.Wait() // the others wait behind it
		close(g.release)
		wg.Wait()

		if g.tokenReadStrongly != 0 || g.timestampedCalls != 1 || g.strongCalls != 2 {
			t.Errorf("store calls %v: %d strong, %d at a timestamp, %d tokened queries read strongly; want the first alone, then users 1, 3, 5 at their timestamp and 2, 4, 6 strongly, none tokened read strongly",
				g.calls, g.strongCalls, g.timestampedCalls, g.tokenReadStrongly)
		}
		for i, a := range answers {
			var got countsfn.Body
			if err := json.Unmarshal(a.Body.Bytes(), &got); err != nil || a.Code != 200 {
				t.Fatalf("%s: %d %s", users[i], a.Code, a.Body)
			}
			if got.Viewer.Reactions["a"].Version != int64(i+1) {
				t.Errorf("%s got %s, want their reaction version %d", users[i], a.Body, i+1)
			}
		}
	})
}

// TestFutureTokenSlowsNoOne: a Session-Token ahead of the instance's clock
// (within the lead it accepts) is read alone, at its timestamp; the tokened
// requests that arrive beside it are read together at a timestamp no later
// than the instance's clock, so none of them waits for the future one's
// timestamp. Every caller still gets their own rows.
func TestFutureTokenSlowsNoOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		users := []string{"first", "normal-1", "future", "normal-2", "plain"}
		for i, u := range users {
			f.reactions[u] = map[string]countstore.ViewerReaction{"a": {Reaction: "like", Version: int64(i + 1)}}
		}
		g := &gatedStore{fakeStore: f, release: make(chan struct{})}
		h := countsfn.New(countsfn.Deps{Verifier: headerVerifier{}, Store: g, MaxAge: 2 * time.Second, MaxStaleness: time.Minute, OwnInFlight: 1})
		now := time.Now()
		tokens := map[string]string{
			"normal-1": session.Encode(now.Add(-time.Millisecond)),
			"normal-2": session.Encode(now),
			"future":   session.Encode(now.Add(900 * time.Millisecond)),
		}
		answers := make([]*httptest.ResponseRecorder, len(users))
		var wg sync.WaitGroup
		read := func(i int) {
			wg.Go(func() {
				r := httptest.NewRequest("GET", "/v1/me/counts?ids=a", nil)
				r.Header.Set("Authorization", "Bearer "+users[i])
				if tok := tokens[users[i]]; tok != "" {
					r.Header.Set(session.Header, tok)
				}
				answers[i] = httptest.NewRecorder()
				h.ServeHTTP(answers[i], r)
			})
		}
		read(0)
		synctest.Wait() // the first read (strong) runs and holds
		for i := 1; i < len(users); i++ {
			read(i)
		}
		synctest.Wait()
		close(g.release)
		wg.Wait()

		batchOf := map[string]int{}
		for i, qs := range g.queries {
			for _, q := range qs {
				batchOf[q.Viewer] = i
				switch {
				case q.Viewer == "future" && len(qs) != 1:
					t.Errorf("the future token read in a batch of %d: %v", len(qs), g.calls[i])
				case q.Viewer != "future" && q.At.After(now):
					t.Errorf("%s read at %v, after the instance's clock %v: it would wait", q.Viewer, q.At, now)
				}
			}
		}
		if batchOf["normal-1"] != batchOf["normal-2"] || batchOf["future"] == batchOf["normal-1"] {
			t.Errorf("batches %v: want the two normal tokens together, the future one alone", g.calls)
		}
		for i, a := range answers {
			var got countsfn.Body
			if err := json.Unmarshal(a.Body.Bytes(), &got); err != nil || a.Code != 200 {
				t.Fatalf("%s: %d %s", users[i], a.Code, a.Body)
			}
			if got.Viewer.Reactions["a"].Version != int64(i+1) {
				t.Errorf("%s got %s, want their reaction version %d", users[i], a.Body, i+1)
			}
		}
	})
}
