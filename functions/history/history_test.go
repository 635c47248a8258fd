package historyfn_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/go-cmp/cmp"

	applyhistoryfn "github.com/videngage/engagement/functions/applyhistory"
	historyfn "github.com/videngage/engagement/functions/history"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
)

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func TestEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.token("alice")
	t1 := time.Now().UTC().Truncate(time.Millisecond).Add(-2 * time.Hour)
	t2 := t1.Add(time.Hour)

	// POST /v1/history: 202 {"recorded":true}, watchedAt given or now.
	for _, body := range []any{
		map[string]any{"videoId": "v1", "watchedAt": ts(t1), "positionSeconds": 12.5},
		map[string]any{"videoId": "v2", "watchedAt": ts(t2)},
		map[string]any{"videoId": "v3"},
	} {
		r := e.do("POST", "/v1/history", tok, body).Want(t, http.StatusAccepted, "POST /v1/history")
		if got := strings.TrimSpace(string(r.Body)); got != `{"recorded":true}` {
			t.Errorf("POST %v: body %s", body, got)
		}
	}
	pub := e.bus.watches()
	if len(pub) != 3 {
		t.Fatalf("published %d watches, want 3", len(pub))
	}
	if now := time.Now(); pub[2].WatchedAt.Before(now.Add(-time.Minute)) || pub[2].WatchedAt.After(now) {
		t.Errorf("watchedAt defaulted to %v, want about now (%v)", pub[2].WatchedAt, now)
	}
	for i, m := range e.bus.Published() {
		a := m.Attributes
		// Unbatched, a message is a batch of one named by its watch.
		if a["kind"] != "watches" || a["batchId"] != pub[i].EventID || pub[i].UserID != "alice" {
			t.Errorf("message %d: attributes %v for watch %+v", i, a, pub[i])
		}
	}
	t3 := pub[2].WatchedAt

	// GET /v1/history: newest first, exact body.
	r := e.do("GET", "/v1/history", tok, nil).Want(t, http.StatusOK, "GET /v1/history")
	want := fmt.Sprintf(`{"entries":[{"videoId":"v3","watchedAt":%q,"positionSeconds":0},{"videoId":"v2","watchedAt":%q,"positionSeconds":0},{"videoId":"v1","watchedAt":%q,"positionSeconds":12.5}]}`,
		ts(t3), ts(t2), ts(t1))
	if got := strings.TrimSpace(string(r.Body)); got != want {
		t.Errorf("GET /v1/history:\n got %s\nwant %s", got, want)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "private, no-store" {
		t.Errorf("GET /v1/history: Cache-Control %q", cc)
	}

	// GET and PUT /v1/history/settings.
	r = e.do("GET", "/v1/history/settings", tok, nil).Want(t, http.StatusOK, "GET settings")
	if got := strings.TrimSpace(string(r.Body)); got != `{"paused":false,"autoDeleteMonths":0}` {
		t.Errorf("default settings: %s", got)
	}
	r = e.do("PUT", "/v1/history/settings", tok, `{"paused":false,"autoDeleteMonths":18}`).Want(t, http.StatusOK, "PUT settings")
	if got := strings.TrimSpace(string(r.Body)); got != `{"paused":false,"autoDeleteMonths":18}` {
		t.Errorf("PUT settings answered %s", got)
	}
	r = e.do("GET", "/v1/history/settings", tok, nil).Want(t, http.StatusOK, "GET settings")
	if got := strings.TrimSpace(string(r.Body)); got != `{"paused":false,"autoDeleteMonths":18}` {
		t.Errorf("settings after PUT: %s", got)
	}

	// DELETE /v1/history/{videoId}.
	r = e.do("DELETE", "/v1/history/v2", tok, nil).Want(t, http.StatusNoContent, "DELETE /v1/history/v2")
	if len(r.Body) != 0 {
		t.Errorf("204 with a body: %s", r.Body)
	}
	e.do("DELETE", "/v1/history/never-watched", tok, nil).Want(t, http.StatusNoContent, "DELETE an unwatched video")
	if diff := cmp.Diff([]string{"v3@" + ts(t3), "v1@" + ts(t1)}, e.listAll("alice", 10)); diff != "" {
		t.Errorf("after DELETE v2 (-want +got):\n%s", diff)
	}

	// DELETE /v1/history?before=: older entries only; exactly at the time is kept.
	e.do("DELETE", "/v1/history?before="+url.QueryEscape(ts(t3)), tok, nil).Want(t, http.StatusNoContent, "DELETE ?before")
	if diff := cmp.Diff([]string{"v3@" + ts(t3)}, e.listAll("alice", 10)); diff != "" {
		t.Errorf("after DELETE ?before=t3 (-want +got):\n%s", diff)
	}
	// A time before 1970 clears nothing.
	e.do("DELETE", "/v1/history?before=1969-01-01T00:00:00Z", tok, nil).Want(t, http.StatusNoContent, "DELETE ?before=1969")
	if got := e.listAll("alice", 10); len(got) != 1 {
		t.Errorf("DELETE ?before=1969 removed entries: %v", got)
	}

	// DELETE /v1/history: everything.
	e.do("DELETE", "/v1/history", tok, nil).Want(t, http.StatusNoContent, "DELETE /v1/history")
	r = e.do("GET", "/v1/history", tok, nil).Want(t, http.StatusOK, "GET after clear")
	if got := strings.TrimSpace(string(r.Body)); got != `{"entries":[]}` {
		t.Errorf("GET after clearing: %s", got)
	}
}

func TestPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	var want []string
	for i := range 23 {
		at := base.Add(time.Duration(i) * time.Second)
		e.do("POST", "/v1/history", e.token("bob"), map[string]any{"videoId": fmt.Sprintf("v%02d", i), "watchedAt": ts(at)}).
			Want(t, http.StatusAccepted, "POST")
		want = append([]string{fmt.Sprintf("v%02d@%s", i, ts(at))}, want...)
	}
	for _, size := range []int{1, 5, 10, 23, 100} {
		if diff := cmp.Diff(want, e.listAll("bob", size)); diff != "" {
			t.Errorf("pageSize %d (-want +got):\n%s", size, diff)
		}
	}
	// Default page size 10.
	var l listJSON
	apitest.DecodeStrict(t, e.do("GET", "/v1/history", e.token("bob"), nil).Want(t, http.StatusOK, "GET").Body, &l)
	if len(l.Entries) != 10 || l.NextPageToken == "" {
		t.Errorf("default page: %d entries, next %q; want 10 and a token", len(l.Entries), l.NextPageToken)
	}
}

func TestPageTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	for _, uid := range []string{"carol", "carol#x"} {
		for i := range 4 {
			e.do("POST", "/v1/history", e.token(uid), map[string]any{"videoId": fmt.Sprintf("%s-%d", strings.ReplaceAll(uid, "#", "_"), i), "watchedAt": ts(base.Add(time.Duration(i) * time.Minute))}).
				Want(t, http.StatusAccepted, "POST")
		}
	}
	var first listJSON
	apitest.DecodeStrict(t, e.do("GET", "/v1/history?pageSize=2", e.token("carol"), nil).Want(t, http.StatusOK, "GET").Body, &first)
	tok := first.NextPageToken
	if tok == "" {
		t.Fatal("no nextPageToken")
	}
	payload, mac, _ := strings.Cut(tok, ".")
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	flip := func(s string, i int) string {
		c := byte('A')
		if s[i] == 'A' {
			c = 'B'
		}
		return s[:i] + string(c) + s[i+1:]
	}
	for name, c := range map[string]struct{ uid, token string }{
		"tampered payload":       {"carol", flip(payload, 3) + "." + mac},
		"tampered mac":           {"carol", payload + "." + flip(mac, 0)},
		"spare bit of last char": {"carol", tok[:len(tok)-1] + string(b64[strings.IndexByte(b64, tok[len(tok)-1])^1])},
		"another user's token":   {"carol#x", tok},
		"a prefix user's token":  {"caro", tok},
		"garbage":                {"carol", "garbage"},
		"token with no mac":      {"carol", payload},
		"empty payload and mac":  {"carol", "."},
		"base64 of a cursor":     {"carol", "OTIyMTY3MjAzNjg1NDc3NTgwNyN2"},
		"another secret's token": {"carol", history.NewPageTokens("another secret").Encode("carol", history.Cursor{At: base, VideoID: "carol-1"})},
	} {
		r := e.do("GET", "/v1/history?pageToken="+url.QueryEscape(c.token), e.token(c.uid), nil)
		apitest.CheckError(t, name, r, http.StatusBadRequest, "INVALID_ARGUMENT", errs.InvalidPageToken)
	}
	// The genuine token still works for its user and continues the list.
	var second listJSON
	apitest.DecodeStrict(t, e.do("GET", "/v1/history?pageSize=2&pageToken="+tok, e.token("carol"), nil).Want(t, http.StatusOK, "GET page 2").Body, &second)
	if len(second.Entries) != 2 || second.Entries[0].VideoID != "carol-1" || second.NextPageToken != "" {
		t.Errorf("second page: %+v", second)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	fixed := time.Now().UTC().Truncate(time.Second)
	e := newEnv(t, withNow(fixed))
	tok := e.token("dave")
	big := `{"videoId":"` + strings.Repeat("a", 70_000) + `"}`
	tests := []struct {
		name         string
		method, path string
		body         any
		code         int
		status       string
		reason       errs.Reason
	}{
		{"malformed JSON", "POST", "/v1/history", `{"videoId":`, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"not an object", "POST", "/v1/history", `["v1"]`, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"two objects", "POST", "/v1/history", `{"videoId":"v1"}{"videoId":"v2"}`, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"empty body", "POST", "/v1/history", ``, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"unknown field", "POST", "/v1/history", `{"videoId":"v1","userId":"mallory"}`, 400, "INVALID_ARGUMENT", errs.UnknownField},
		{"no videoId", "POST", "/v1/history", `{"positionSeconds":1}`, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"videoId with slash", "POST", "/v1/history", `{"videoId":"a/b"}`, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"videoId too long", "POST", "/v1/history", `{"videoId":"` + strings.Repeat("v", 65) + `"}`, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"videoId not a string", "POST", "/v1/history", `{"videoId":7}`, 400, "INVALID_ARGUMENT", errs.WrongFieldType},
		{"watchedAt 5 min 1 s ahead", "POST", "/v1/history", map[string]any{"videoId": "v1", "watchedAt": ts(fixed.Add(5*time.Minute + time.Second))}, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"watchedAt a year ahead", "POST", "/v1/history", map[string]any{"videoId": "v1", "watchedAt": ts(fixed.AddDate(1, 0, 0))}, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"watchedAt not RFC 3339", "POST", "/v1/history", `{"videoId":"v1","watchedAt":"yesterday"}`, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"watchedAt before 1970", "POST", "/v1/history", `{"videoId":"v1","watchedAt":"1969-12-31T23:59:59Z"}`, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"negative position", "POST", "/v1/history", `{"videoId":"v1","positionSeconds":-1}`, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"position too large", "POST", "/v1/history", `{"videoId":"v1","positionSeconds":1e300}`, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"body over 64 KiB", "POST", "/v1/history", big, 413, "INVALID_ARGUMENT", errs.BodyTooLarge},
		{"pageSize 0", "GET", "/v1/history?pageSize=0", nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"pageSize 101", "GET", "/v1/history?pageSize=101", nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"pageSize -1", "GET", "/v1/history?pageSize=-1", nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"pageSize abc", "GET", "/v1/history?pageSize=abc", nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"pageSize 1.5", "GET", "/v1/history?pageSize=1.5", nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"pageSize 10x", "GET", "/v1/history?pageSize=10x", nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"bad videoId in path", "DELETE", "/v1/history/bad!id", nil, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"bad before", "DELETE", "/v1/history?before=yesterday", nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"pageSize twice", "GET", "/v1/history?pageSize=2&pageSize=3", nil, 400, "INVALID_ARGUMENT", errs.RepeatedParameter},
		{"before twice", "DELETE", "/v1/history?before=2026-01-01T00:00:00Z&before=2026-01-02T00:00:00Z", nil, 400, "INVALID_ARGUMENT", errs.RepeatedParameter},
		{"autoDeleteMonths 5", "PUT", "/v1/history/settings", `{"paused":false,"autoDeleteMonths":5}`, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"autoDeleteMonths -3", "PUT", "/v1/history/settings", `{"paused":false,"autoDeleteMonths":-3}`, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"autoDeleteMonths 3.5", "PUT", "/v1/history/settings", `{"paused":false,"autoDeleteMonths":3.5}`, 400, "INVALID_ARGUMENT", errs.WrongFieldType},
		{"settings without paused", "PUT", "/v1/history/settings", `{"autoDeleteMonths":3}`, 400, "INVALID_ARGUMENT", errs.MissingField},
		{"settings without months", "PUT", "/v1/history/settings", `{"paused":true}`, 400, "INVALID_ARGUMENT", errs.MissingField},
		{"paused not a bool", "PUT", "/v1/history/settings", `{"paused":"yes","autoDeleteMonths":3}`, 400, "INVALID_ARGUMENT", errs.WrongFieldType},
		{"settings unknown field", "PUT", "/v1/history/settings", `{"paused":true,"autoDeleteMonths":3,"x":1}`, 400, "INVALID_ARGUMENT", errs.UnknownField},
		{"settings over 64 KiB", "PUT", "/v1/history/settings", `{"paused":true,"autoDeleteMonths":3,"x":"` + strings.Repeat("a", 70_000) + `"}`, 413, "INVALID_ARGUMENT", errs.BodyTooLarge},
	}
	for _, tc := range tests {
		apitest.CheckError(t, tc.name, e.do(tc.method, tc.path, tok, tc.body), tc.code, tc.status, tc.reason)
	}
	if n := len(e.bus.watches()); n != 0 {
		t.Errorf("bad requests published %d watches", n)
	}
	settings := e.do("GET", "/v1/history/settings", tok, nil).Want(t, http.StatusOK, "GET settings")
	if got := strings.TrimSpace(string(settings.Body)); got != `{"paused":false,"autoDeleteMonths":0}` {
		t.Errorf("bad PUTs changed the settings: %s", got)
	}

	// The limits themselves are accepted.
	for _, body := range []string{
		`{"videoId":"` + strings.Repeat("v", 64) + `"}`,
		fmt.Sprintf(`{"videoId":"v1","watchedAt":%q}`, ts(fixed.Add(5*time.Minute))),
		fmt.Sprintf(`{"videoId":"v1","watchedAt":%q}`, fixed.In(time.FixedZone("", 3600)).Format(time.RFC3339)),
		fmt.Sprintf(`{"videoId":"v1","positionSeconds":%d}`, history.MaxPositionSeconds),
	} {
		e.do("POST", "/v1/history", tok, body).Want(t, http.StatusAccepted, "POST "+body)
	}
	for _, q := range []string{"pageSize=1", "pageSize=100"} {
		e.do("GET", "/v1/history?"+q, tok, nil).Want(t, http.StatusOK, "GET "+q)
	}
	for _, m := range []int{0, 3, 18, 36} {
		e.do("PUT", "/v1/history/settings", tok, fmt.Sprintf(`{"paused":false,"autoDeleteMonths":%d}`, m)).Want(t, http.StatusOK, "PUT settings")
	}
}

func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	tokens := map[string]struct {
		token  string
		reason errs.Reason
	}{
		"no token":       {"", errs.TokenMissing},
		"expired":        {e.token("erin", localauth.IssuedAt(now.Add(-3*time.Hour)), localauth.ExpiresAt(now.Add(-2*time.Hour))), errs.TokenExpired},
		"wrong audience": {e.token("erin", localauth.Audience("another-project")), errs.TokenInvalid},
		"wrong issuer":   {e.token("erin", localauth.Iss("https://securetoken.google.com/another-project")), errs.TokenInvalid},
		"wrong key":      {e.token("erin", localauth.SignWith(e.other)), errs.TokenInvalid},
		"alg none":       {e.token("erin", localauth.AlgNone()), errs.TokenInvalid},
		"malformed":      {"not.a.token", errs.TokenInvalid},
		"empty sub":      {e.token(""), errs.TokenInvalid},
	}
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/history", `{"videoId":"v1"}`},
		{"GET", "/v1/history", ""},
		{"DELETE", "/v1/history", ""},
		{"DELETE", "/v1/history/v1", ""},
		{"GET", "/v1/history/settings", ""},
		{"PUT", "/v1/history/settings", `{"paused":true,"autoDeleteMonths":3}`},
	}
	for name, tok := range tokens {
		for _, rt := range routes {
			var body any
			if rt.body != "" {
				body = rt.body
			}
			r := e.do(rt.method, rt.path, tok.token, body)
			what := fmt.Sprintf("%s %s with %s", rt.method, rt.path, name)
			apitest.CheckError(t, what, r, http.StatusUnauthorized, "UNAUTHENTICATED", tok.reason)
			if r.Header.Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("%s: WWW-Authenticate %q", what, r.Header.Get("WWW-Authenticate"))
			}
		}
	}
	// Bad input with a bad token is still a 401: identity is checked first.
	apitest.CheckError(t, "bad body, no token", e.do("POST", "/v1/history", "", `{"videoId":`), http.StatusUnauthorized, "UNAUTHENTICATED", errs.TokenMissing)
	if n := len(e.bus.watches()); n != 0 {
		t.Errorf("unauthenticated requests published %d watches", n)
	}
	// The settings of erin were never written.
	r := e.do("GET", "/v1/history/settings", e.token("erin"), nil).Want(t, http.StatusOK, "GET settings")
	if got := strings.TrimSpace(string(r.Body)); got != `{"paused":false,"autoDeleteMonths":0}` {
		t.Errorf("settings written without a valid token: %s", got)
	}
}

func TestWrongMethod(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.token("fred")
	for _, tc := range []struct {
		method, path string
		allow        []string
	}{
		{"PUT", "/v1/history", []string{"DELETE", "GET", "POST"}},
		{"PATCH", "/v1/history", []string{"DELETE", "GET", "POST"}},
		{"GET", "/v1/history/v1", []string{"DELETE"}},
		{"POST", "/v1/history/v1", []string{"DELETE"}},
		{"POST", "/v1/history/settings", []string{"DELETE", "GET", "PUT"}}, // DELETE: "settings" is also a video id
		{"PATCH", "/v1/history/settings", []string{"DELETE", "GET", "PUT"}},
	} {
		r := e.do(tc.method, tc.path, tok, nil)
		what := tc.method + " " + tc.path
		apitest.CheckError(t, what, r, http.StatusMethodNotAllowed, "INVALID_ARGUMENT", errs.MethodNotAllowed)
		var allow []string
		for _, m := range strings.Split(r.Header.Get("Allow"), ",") {
			if m = strings.TrimSpace(m); m != "" && m != "HEAD" {
				allow = append(allow, m)
			}
		}
		slices.Sort(allow)
		if diff := cmp.Diff(tc.allow, allow); diff != "" {
			t.Errorf("%s: Allow %q (-want +got):\n%s", what, r.Header.Get("Allow"), diff)
		}
	}
	apitest.CheckError(t, "unknown path", e.do("GET", "/v1/histories", tok, nil), http.StatusNotFound, "NOT_FOUND", errs.UnknownPath)
}

func TestPaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.token("gina")
	at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	e.do("PUT", "/v1/history/settings", tok, `{"paused":true,"autoDeleteMonths":0}`).Want(t, http.StatusOK, "pause")
	r := e.do("POST", "/v1/history", tok, map[string]any{"videoId": "v1", "watchedAt": ts(at)}).Want(t, http.StatusAccepted, "POST while paused")
	if got := strings.TrimSpace(string(r.Body)); got != `{"recorded":false}` {
		t.Errorf("POST while paused: %s", got)
	}
	if n := len(e.bus.watches()); n != 0 {
		t.Errorf("published %d watches while paused", n)
	}
	if got := e.listAll("gina", 10); len(got) != 0 {
		t.Errorf("history while paused: %v", got)
	}
	// Another user is not paused.
	r = e.do("POST", "/v1/history", e.token("gina2"), map[string]any{"videoId": "v1"}).Want(t, http.StatusAccepted, "POST other user")
	if got := strings.TrimSpace(string(r.Body)); got != `{"recorded":true}` {
		t.Errorf("POST by another user: %s", got)
	}
	// Resumed, it records again.
	e.do("PUT", "/v1/history/settings", tok, `{"paused":false,"autoDeleteMonths":0}`).Want(t, http.StatusOK, "resume")
	r = e.do("POST", "/v1/history", tok, map[string]any{"videoId": "v1", "watchedAt": ts(at)}).Want(t, http.StatusAccepted, "POST after resume")
	if got := strings.TrimSpace(string(r.Body)); got != `{"recorded":true}` {
		t.Errorf("POST after resume: %s", got)
	}
	if diff := cmp.Diff([]string{"v1@" + ts(at)}, e.listAll("gina", 10)); diff != "" {
		t.Errorf("history after resume (-want +got):\n%s", diff)
	}
}

func TestAutoDeleteHorizon(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Millisecond)
	e := newEnv(t, withNow(now))
	tok := e.token("hank")
	old := now.AddDate(0, -4, 0)
	edge := now.AddDate(0, -3, 0) // exactly at the 3-month horizon: shown
	recent := now.AddDate(0, -1, 0)
	for _, w := range []struct {
		v  string
		at time.Time
	}{{"old", old}, {"edge", edge}, {"recent", recent}} {
		e.do("POST", "/v1/history", tok, map[string]any{"videoId": w.v, "watchedAt": ts(w.at)}).Want(t, http.StatusAccepted, "POST")
	}
	all := []string{"recent@" + ts(recent), "edge@" + ts(edge), "old@" + ts(old)}
	if diff := cmp.Diff(all, e.listAll("hank", 10)); diff != "" {
		t.Errorf("autoDeleteMonths 0 (-want +got):\n%s", diff)
	}
	e.do("PUT", "/v1/history/settings", tok, `{"paused":false,"autoDeleteMonths":3}`).Want(t, http.StatusOK, "PUT 3 months")
	for _, size := range []int{1, 2, 10} {
		if diff := cmp.Diff(all[:2], e.listAll("hank", size)); diff != "" {
			t.Errorf("autoDeleteMonths 3, pageSize %d (-want +got):\n%s", size, diff)
		}
	}
	// The horizon hides; going back to 0 shows what the table still holds.
	e.do("PUT", "/v1/history/settings", tok, `{"paused":false,"autoDeleteMonths":0}`).Want(t, http.StatusOK, "PUT 0 months")
	if diff := cmp.Diff(all, e.listAll("hank", 10)); diff != "" {
		t.Errorf("back to autoDeleteMonths 0 (-want +got):\n%s", diff)
	}
}

// TestReadsApplyRetention: a watch older than the table's retention is not
// listed even while garbage collection has not removed it yet, whatever the
// user's auto-delete; the later of the two bounds wins.
func TestReadsApplyRetention(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Millisecond)
	e := newEnv(t, withNow(now), withRetention(60*24*time.Hour))
	tok := e.token("ivy")
	past := now.AddDate(0, 0, -70)   // past the retention
	inside := now.AddDate(0, 0, -50) // inside it
	for _, w := range []struct {
		v  string
		at time.Time
	}{{"past", past}, {"inside", inside}} {
		e.do("POST", "/v1/history", tok, map[string]any{"videoId": w.v, "watchedAt": ts(w.at)}).Want(t, http.StatusAccepted, "POST")
	}
	// The table still holds both (the emulator's collector does not run on
	// the rules a table is created with).
	page, err := e.store.List(t.Context(), "ivy", nil, time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 2 {
		t.Fatalf("the table holds %d entries, want both", len(page.Entries))
	}
	want := []string{"inside@" + ts(inside)}
	if diff := cmp.Diff(want, e.listAll("ivy", 10)); diff != "" {
		t.Errorf("autoDeleteMonths 0 (-want +got):\n%s", diff)
	}
	// A 3-month horizon is older than the 60-day retention: the retention wins.
	e.do("PUT", "/v1/history/settings", tok, `{"paused":false,"autoDeleteMonths":3}`).Want(t, http.StatusOK, "PUT 3 months")
	if diff := cmp.Diff(want, e.listAll("ivy", 10)); diff != "" {
		t.Errorf("autoDeleteMonths 3 (-want +got):\n%s", diff)
	}
}

func TestDuplicateDeliveryStoresOneEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bus.Redeliver(3) // every message delivered three times
	tok := e.token("ivy")
	at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	body := map[string]any{"videoId": "v1", "watchedAt": ts(at), "positionSeconds": 30}
	// The client retries the same watch (lost answer): two publishes of one
	// event, each delivered three times.
	for range 2 {
		e.do("POST", "/v1/history", tok, body).Want(t, http.StatusAccepted, "POST")
	}
	pub := e.bus.watches()
	if len(pub) != 2 || pub[0].EventID != pub[1].EventID {
		t.Fatalf("published %+v; want the same event twice", pub)
	}
	// The same watch a few microseconds later is the same millisecond.
	body["watchedAt"] = ts(at.Add(300 * time.Microsecond))
	e.do("POST", "/v1/history", tok, body).Want(t, http.StatusAccepted, "POST")
	if diff := cmp.Diff([]string{"v1@" + ts(at)}, e.listAll("ivy", 10)); diff != "" {
		t.Errorf("history after duplicates (-want +got):\n%s", diff)
	}
	var l listJSON
	apitest.DecodeStrict(t, e.do("GET", "/v1/history", tok, nil).Body, &l)
	if len(l.Entries) != 1 || l.Entries[0].PositionSeconds != 30 {
		t.Errorf("entries %+v", l.Entries)
	}
}

func TestPublisherDown(t *testing.T) {
	t.Parallel()
	closed, err := pubsub.NewClient(context.Background(), "closed-client")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for name, publisher := range map[string]func(*env) *bus.Publisher{
		// The real publisher on a topic that does not exist: Pub/Sub refuses.
		"no such topic": func(e *env) *bus.Publisher { return bus.NewPublisher(e.clients.PubSub, "no-such-topic") },
		// The real publisher on a client whose connection is gone: it
		// retries until the request's deadline.
		"closed client": func(*env) *bus.Publisher { return bus.NewPublisher(closed, "history-events") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var p *bus.Publisher
			e := newEnv(t, withRequestTimeout(3*time.Second), withPublisher(func(e *env) historyfn.Publisher {
				p = publisher(e)
				return p
			}))
			if name != "closed client" {
				// Stop waits out the publish timeout (15 s) of a message
				// it could never send: not worth waiting for here.
				t.Cleanup(p.Stop)
			}
			tok := e.token("kate")
			r := e.do("POST", "/v1/history", tok, map[string]any{"videoId": "v1"})
			apitest.CheckError(t, "POST with Pub/Sub down", r, http.StatusServiceUnavailable, "UNAVAILABLE", errs.BackendUnavailable)
			if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("Retry-After %q, want a number of seconds", r.Header.Get("Retry-After"))
			}
			if strings.Contains(string(r.Body), "recorded") || strings.Contains(string(r.Body), "no-such-topic") {
				t.Errorf("503 body claims or leaks: %s", r.Body)
			}
			if p, err := e.store.List(t.Context(), "kate", nil, time.Time{}, 10); err != nil || len(p.Entries) != 0 {
				t.Errorf("history after a failed publish: %+v, %v", p, err)
			}
		})
	}
}

func TestRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimit(2))
	tok := e.token("jack")
	for i := range 2 {
		e.do("POST", "/v1/history", tok, map[string]any{"videoId": fmt.Sprintf("v%d", i)}).Want(t, http.StatusAccepted, "POST within the limit")
	}
	r := e.do("POST", "/v1/history", tok, map[string]any{"videoId": "v9"})
	apitest.CheckError(t, "POST over the limit", r, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", errs.RateLimited)
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Errorf("Retry-After %q, want 1 to 60 seconds", r.Header.Get("Retry-After"))
	}
	if n := len(e.bus.watches()); n != 2 {
		t.Errorf("published %d watches, want 2", n)
	}
	// Reads are not limited; another user is not limited.
	e.do("GET", "/v1/history", tok, nil).Want(t, http.StatusOK, "GET while limited")
	e.do("POST", "/v1/history", e.token("jack2"), map[string]any{"videoId": "v1"}).Want(t, http.StatusAccepted, "another user")
}

// Deletions (of one video or a clear) and settings changes are limited per
// user, each kind on its own and apart from the watches.
func TestDeletesAndSettingsRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOtherLimit(2))
	tok := e.token("jill")
	e.do("DELETE", "/v1/history/v1", tok, nil).Want(t, http.StatusNoContent, "first deletion")
	e.do("DELETE", "/v1/history", tok, nil).Want(t, http.StatusNoContent, "second deletion")
	for _, path := range []string{"/v1/history/v2", "/v1/history"} {
		r := e.do("DELETE", path, tok, nil)
		apitest.CheckError(t, "DELETE "+path+" over the limit", r, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", errs.RateLimited)
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
			t.Errorf("Retry-After %q, want 1 to 60 seconds", r.Header.Get("Retry-After"))
		}
	}
	settings := map[string]any{"paused": false, "autoDeleteMonths": 3}
	for range 2 {
		e.do("PUT", "/v1/history/settings", tok, settings).Want(t, http.StatusOK, "settings within the limit")
	}
	apitest.CheckError(t, "PUT settings over the limit", e.do("PUT", "/v1/history/settings", tok, settings), http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", errs.RateLimited)
	// Watches, reads and other users are not held back.
	e.do("POST", "/v1/history", tok, map[string]any{"videoId": "v3"}).Want(t, http.StatusAccepted, "a watch")
	e.do("GET", "/v1/history/settings", tok, nil).Want(t, http.StatusOK, "GET settings while limited")
	e.do("DELETE", "/v1/history/v1", e.token("jill2"), nil).Want(t, http.StatusNoContent, "another user")
}

// TestThroughPubSub sends the watches through the Pub/Sub emulator: the real
// publisher, the history-apply subscription, and the consumer fed each
// pulled message as the CloudEvent a push would deliver.
func TestThroughPubSub(t *testing.T) {
	t.Parallel()
	var p *bus.Publisher
	e := newEnv(t, withPublisher(func(e *env) historyfn.Publisher {
		p = bus.NewPublisher(e.clients.PubSub, e.cfg.PubSub.HistoryTopic)
		return p
	}))
	t.Cleanup(p.Stop)
	tok := e.token("liam")
	at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	bodies := []map[string]any{
		{"videoId": "v1", "watchedAt": ts(at), "positionSeconds": 5},
		{"videoId": "v2", "watchedAt": ts(at.Add(time.Minute))},
		{"videoId": "v1", "watchedAt": ts(at.Add(2 * time.Minute)), "positionSeconds": 6}, // rewatch
		{"videoId": "v1", "watchedAt": ts(at.Add(2 * time.Minute)), "positionSeconds": 6}, // retried request
	}
	for _, b := range bodies {
		e.do("POST", "/v1/history", tok, b).Want(t, http.StatusAccepted, "POST")
	}

	consume := applyhistoryfn.New(e.store, nil)
	sub := emulators.SubscriptionName(e.cfg.Project, "history-apply")
	ps := e.clients.PubSub.SubscriptionAdminClient
	delivered := 0
	for deadline := time.Now().Add(20 * time.Second); delivered < len(bodies); {
		if time.Now().After(deadline) {
			t.Fatalf("pulled %d of %d messages", delivered, len(bodies))
		}
		resp, err := ps.Pull(t.Context(), &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 10})
		if err != nil {
			t.Fatalf("pull %s: %v", sub, err)
		}
		var acks []string
		for _, m := range resp.ReceivedMessages {
			msg := m.GetMessage()
			if msg.GetAttributes()["kind"] != "watches" || msg.GetAttributes()["batchId"] == "" {
				t.Errorf("message attributes %v", msg.GetAttributes())
			}
			// Delivered twice: at-least-once.
			for range 2 {
				if got := pushtest.DeliverBody(t, consume, pushBody(t, msg.GetMessageId(), msg.GetData(), msg.GetAttributes())); got != pushtest.Acked {
					t.Fatalf("ApplyHistory of message %s: %v", msg.GetMessageId(), got)
				}
			}
			acks = append(acks, m.GetAckId())
			delivered++
		}
		if len(acks) > 0 {
			if err := ps.Acknowledge(t.Context(), &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: acks}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{"v1@" + ts(at.Add(2*time.Minute)), "v2@" + ts(at.Add(time.Minute))}
	if diff := cmp.Diff(want, e.listAll("liam", 10)); diff != "" {
		t.Errorf("history through Pub/Sub (-want +got):\n%s", diff)
	}
}

// TestBatchedPublishes: with batching on (as deployed), watches accepted
// together leave as one message; each request is answered 202 only once
// its batch is published, and every watch is in exactly one message.
func TestBatchedPublishes(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{History: config.History{BatchLinger: 50 * time.Millisecond}}
	batch := historyfn.Batching(cfg)
	e := newEnv(t, func(_ *env, d *historyfn.Deps) { d.Batch = batch })
	at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"videoId": fmt.Sprintf("b%02d", i), "watchedAt": ts(at.Add(time.Duration(i) * time.Second))}
			e.do("POST", "/v1/history", e.token(fmt.Sprintf("batcher-%d", i)), body).Want(t, http.StatusAccepted, "POST")
		}()
	}
	wg.Wait()
	pub := e.bus.watches()
	if len(pub) != n {
		t.Fatalf("published %d watches, want %d", len(pub), n)
	}
	if len(e.bus.Published()) >= n/2 {
		t.Errorf("%d messages for %d concurrent watches, want them batched", len(e.bus.Published()), n)
	}
	seen := map[string]bool{}
	for _, w := range pub {
		seen[w.EventID] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct watches published, want %d", len(seen), n)
	}
}
