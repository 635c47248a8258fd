package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/errs"
)

func TestMain(m *testing.M) {
	// The event functions of this process are built once, from the first
	// stack's environment, as a Cloud Functions instance is: every stack
	// names one account records address, which forwards to the stack
	// running now.
	records := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(currentStack.Load())
	}})
	accountsHost = func(string) string { return strings.TrimPrefix(records.URL, "http://") }
	emulatortest.Main(m)
}

// currentStack is the base URL of the stack startLocal started last.
var currentStack atomic.Pointer[url.URL]

// startLocal runs the local stack in process against the test binary's
// emulators, in a project of its own, and waits for /healthz.
func startLocal(t *testing.T) string {
	t.Helper()
	emulatortest.Stack(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	t.Setenv("PORT", port)
	t.Setenv("GOOGLE_CLOUD_PROJECT", fmt.Sprintf("local-e2e-%d", os.Getpid()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- realMain(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("realMain: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("realMain did not stop within 15 s of cancellation")
		}
	})
	base := "http://127.0.0.1:" + port
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	currentStack.Store(u)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("realMain ended early: %v", err)
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not 200 within 60 s (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type client struct {
	t     *testing.T
	base  string
	token string
}

// do sends one request; every answer of the public API is checked against
// docs/openapi.yaml (apitest.Request). body "" sends none.
func (c client) do(method, path, body string, hdr ...string) (int, http.Header, string) {
	c.t.Helper()
	var b any
	if body != "" {
		b = body
	}
	a := apitest.Request(c.t, method, c.base+path, c.token, b, hdr...)
	return a.Code, a.Header, string(a.Body)
}

func token(t *testing.T, base, uid string) string {
	t.Helper()
	return tokenFor(t, base, url.Values{"uid": {uid}})
}

// tokenFor mints the token /dev/token answers for q (uid, and optionally
// moderator or accountAge).
func tokenFor(t *testing.T, base string, q url.Values) string {
	t.Helper()
	code, _, body := client{t: t, base: base}.do("GET", "/dev/token?"+q.Encode(), "")
	if code != 200 {
		t.Fatalf("/dev/token: %d %s", code, body)
	}
	var v struct{ IDToken string }
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.IDToken == "" {
		t.Fatalf("/dev/token body %q: %v", body, err)
	}
	return v.IDToken
}

// TestLocalStackHistoryWalkthrough drives docs/api.md's history walk-through
// through the whole local stack: HTTP → Pub/Sub push → ApplyHistory →
// Bigtable → read path.
func TestLocalStackHistoryWalkthrough(t *testing.T) {
	base := startLocal(t)
	alice := client{t: t, base: base, token: token(t, base, "alice")}

	for _, body := range []string{
		`{"videoId":"intro","positionSeconds":42.5}`,
		`{"videoId":"talk","watchedAt":"2026-01-02T15:04:05Z"}`,
		`{"videoId":"intro","watchedAt":"2026-01-01T00:00:00Z"}`,
	} {
		if code, _, resp := alice.do("POST", "/v1/history", body); code != 202 || resp != "{\"recorded\":true}\n" {
			t.Fatalf("POST /v1/history %s: %d %s", body, code, resp)
		}
	}
	var page struct {
		Entries []struct {
			VideoID         string  `json:"videoId"`
			PositionSeconds float64 `json:"positionSeconds"`
		} `json:"entries"`
		NextPageToken string `json:"nextPageToken"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, body := alice.do("GET", "/v1/history", "")
		if code != 200 {
			t.Fatalf("GET /v1/history: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Entries) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history not applied within 10 s: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if page.Entries[0].VideoID != "intro" || page.Entries[0].PositionSeconds != 42.5 || page.Entries[1].VideoID != "talk" {
		t.Errorf("entries = %+v, want intro (42.5) then talk", page.Entries)
	}

	// Another user sees nothing of alice's.
	bob := client{t: t, base: base, token: token(t, base, "bob")}
	if code, _, body := bob.do("GET", "/v1/history", ""); code != 200 || body != "{\"entries\":[]}\n" {
		t.Errorf("bob's history: %d %s", code, body)
	}

	if code, _, body := alice.do("DELETE", "/v1/history/talk", ""); code != 204 {
		t.Errorf("DELETE /v1/history/talk: %d %s", code, body)
	}
	if code, _, body := alice.do("PUT", "/v1/history/settings", `{"paused":true,"autoDeleteMonths":18}`); code != 200 ||
		body != "{\"paused\":true,\"autoDeleteMonths\":18}\n" {
		t.Errorf("PUT settings: %d %s", code, body)
	}
	if code, _, body := alice.do("POST", "/v1/history", `{"videoId":"secret"}`); code != 202 || body != "{\"recorded\":false}\n" {
		t.Errorf("paused POST: %d %s", code, body)
	}
	if code, _, body := alice.do("DELETE", "/v1/history", ""); code != 204 {
		t.Errorf("DELETE /v1/history: %d %s", code, body)
	}
	if code, _, body := alice.do("GET", "/v1/history", ""); code != 200 || body != "{\"entries\":[]}\n" {
		t.Errorf("history after clearing: %d %s", code, body)
	}
}

func TestLocalStackPlumbing(t *testing.T) {
	base := startLocal(t)
	anon := client{t: t, base: base}

	code, hdr, body := anon.do("GET", "/v1/history", "")
	if code != 401 || hdr.Get("WWW-Authenticate") != "Bearer" ||
		body != `{"error":{"code":401,"status":"UNAUTHENTICATED","message":"a bearer token is required: send Authorization: Bearer \u003cID token\u003e",`+
			`"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TOKEN_MISSING","domain":"engagement.videngage.dev"}]}}`+"\n" {
		t.Errorf("no token: %d %v %s", code, hdr, body)
	}
	code, hdr, _ = anon.do("PATCH", "/v1/history", "")
	if code != 405 || hdr.Get("Allow") == "" {
		t.Errorf("PATCH: %d Allow=%q", code, hdr.Get("Allow"))
	}
	// CORS preflight: any origin locally, the spec's headers.
	code, hdr, _ = anon.do("OPTIONS", "/v1/history", "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	if code != 204 || hdr.Get("Access-Control-Allow-Origin") != "*" ||
		!strings.Contains(hdr.Get("Access-Control-Allow-Headers"), "Idempotency-Key") {
		t.Errorf("preflight: %d %v", code, hdr)
	}
	// A page on another local origin gets its token from the local issuer
	// as it calls the API: with CORS, for loopback origins only.
	for _, origin := range []string{"http://127.0.0.1:1", "http://localhost:3000", "http://[::1]:5173"} {
		code, hdr, body = anon.do("GET", "/dev/token?uid=alice", "", "Origin", origin)
		if code != 200 || hdr.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(body, `"idToken"`) {
			t.Errorf("/dev/token from %s: %d %v %s", origin, code, hdr, body)
		}
		code, hdr, _ = anon.do("OPTIONS", "/dev/token", "", "Origin", origin, "Access-Control-Request-Method", "GET")
		if code != 204 || hdr.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(hdr.Get("Access-Control-Allow-Methods"), "GET") {
			t.Errorf("preflight of /dev/token from %s: %d %v", origin, code, hdr)
		}
	}
	// A web site the developer visits cannot mint tokens from the stack.
	for _, origin := range []string{"https://app.example", "http://127.0.0.1.example:80", "null"} {
		code, hdr, _ = anon.do("GET", "/dev/token?uid=alice", "", "Origin", origin)
		if hdr.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("/dev/token from %s: %d Access-Control-Allow-Origin %q", origin, code, hdr.Get("Access-Control-Allow-Origin"))
		}
		code, hdr, _ = anon.do("OPTIONS", "/dev/token", "", "Origin", origin, "Access-Control-Request-Method", "GET")
		if code != 403 || hdr.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight of /dev/token from %s: %d %v", origin, code, hdr)
		}
	}
	// The playground page, at / only.
	code, hdr, body = anon.do("GET", "/", "")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") || !strings.Contains(body, "<title>Engagement API playground</title>") {
		t.Errorf("GET /: %d %v", code, hdr)
	}
	// Unknown paths, on the stack's own mux and under a function's routes,
	// answer the error body.
	for _, path := range []string{"/nothing-here", "/v1/nothing-here", "/v1/comments/c1/nothing"} {
		a := apitest.Request(t, "GET", base+path, "", nil)
		apitest.CheckError(t, "GET "+path, a, 404, "NOT_FOUND", errs.UnknownPath)
	}
	// A query string that does not parse is refused, not read as absent.
	for _, path := range []string{"/v1/videos/v1/comments?pageToken=%%%%", "/v1/counts?ids=a&x=%zz", "/dev/token?uid=%%"} {
		a := apitest.Request(t, "GET", base+path, "", nil)
		apitest.CheckError(t, "GET "+path, a, 400, "INVALID_ARGUMENT", errs.InvalidQuery)
	}
	// A parameter sent twice is refused, not read for its first value.
	for _, path := range []string{"/v1/counts?ids=a&ids=b", "/v1/videos/v1/comments?pageSize=1&pageSize=2", "/dev/token?uid=a&uid=b"} {
		a := apitest.Request(t, "GET", base+path, "", nil)
		apitest.CheckError(t, "GET "+path, a, 400, "INVALID_ARGUMENT", errs.RepeatedParameter)
	}
	// Every answer carries the security headers: the functions', the
	// stack's own, errors included.
	for _, path := range []string{"/", "/healthz", "/v1/counts?ids=a", "/v1/history", "/nothing-here", "/dev/token?uid=alice"} {
		_, hdr, _ := anon.do("GET", path, "")
		if !strings.HasPrefix(hdr.Get("Strict-Transport-Security"), "max-age=") || hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: Strict-Transport-Security %q, X-Content-Type-Options %q", path,
				hdr.Get("Strict-Transport-Security"), hdr.Get("X-Content-Type-Options"))
		}
	}
	code, _, body = anon.do("GET", "/dev/token?uid=", "")
	if code != 400 || !strings.Contains(body, `"status":"INVALID_ARGUMENT"`) {
		t.Errorf("/dev/token without uid: %d %s", code, body)
	}
	// The stack's own scheduler runs the same jobs meanwhile: each job
	// asked by hand beside it must answer success the first time.
	for _, path := range []string{"/internal/rollup", "/internal/reconcile", "/internal/expire-history", "/internal/detect-manipulation"} {
		if code, _, body := anon.do("POST", path, ""); code >= 300 {
			t.Errorf("POST %s: %d %s", path, code, body)
		}
	}
	// An event function is reachable only as an event function.
	if code, _, _ := anon.do("POST", "/events/NoSuchFunction", "{}"); code != 404 {
		t.Errorf("unknown event function: %d", code)
	}
}

// TestListensOnLoopback: the stack mints any user's token, so it is not
// offered to the network unless LOCAL_LISTEN_HOST says so.
func TestListensOnLoopback(t *testing.T) {
	t.Setenv("PORT", "0")
	t.Setenv("LOCAL_LISTEN_HOST", "")
	ln, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Errorf("listening on %v, want a loopback address", ln.Addr())
	}
	t.Setenv("LOCAL_LISTEN_HOST", "0.0.0.0")
	ln2, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if ip := ln2.Addr().(*net.TCPAddr).IP; !ip.IsUnspecified() {
		t.Errorf("LOCAL_LISTEN_HOST=0.0.0.0: listening on %v", ln2.Addr())
	}
}
