package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/videngage/engagement/cmd/internal/benchstack"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/history"
)

func TestMain(m *testing.M) {
	flag.Parse()
	emulatortest.Main(m)
}

func newTestStack(t *testing.T, env ...string) (*stack, *benchstack.Server) {
	t.Helper()
	srv, err := benchstack.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	opts := []emulatortest.Option{emulatortest.WithPushEndpoint(srv.PushEndpoint)}
	for i := 0; i+1 < len(env); i += 2 {
		opts = append(opts, emulatortest.WithEnv(env[i], env[i+1]))
	}
	cfg := emulatortest.New(t, opts...)
	st, err := newStack(context.Background(), cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st, srv
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// call sends one request and checks its answer against docs/openapi.yaml
// (apitest.Request); body "" sends none.
func call(t *testing.T, method, url, token, body string, headers ...string) reply {
	t.Helper()
	var b any
	if body != "" {
		b = body
	}
	a := apitest.Request(t, method, url, token, b, headers...)
	r := reply{status: a.Code, header: a.Header, raw: string(a.Body)}
	_ = json.Unmarshal(a.Body, &r.body)
	return r
}

func (r reply) want(t *testing.T, status int) reply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	return r
}

func (st *stack) mustToken(t *testing.T, uid string, moderator bool) string {
	t.Helper()
	tok, err := st.token(uid, moderator)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func countOf(r reply, id, field string) float64 {
	c, _ := r.body["counts"].(map[string]any)
	v, _ := c[id].(map[string]any)
	n, _ := v[field].(float64)
	return n
}

// waitAnonymous polls the anonymous counts of id until field equals want.
func waitAnonymous(t *testing.T, base, id, field string, want float64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r := call(t, "GET", base+"/v1/counts?ids="+id, "", "").want(t, 200)
		if countOf(r, id, field) == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s of %s still %v after %v, want %v", field, id, countOf(r, id, field), within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReactionsAndCountsOverHTTP(t *testing.T) {
	st, srv := newTestStack(t)
	base := srv.URL
	alice := st.mustToken(t, "alice", false)

	r := call(t, "PUT", base+"/v1/reactions/vid1", alice, `{"reaction":"like"}`).want(t, 200)
	liked, _ := r.body["version"].(float64)
	if r.body["reaction"] != "like" || liked < 1 || r.body["contentId"] != "vid1" || r.header.Get("ETag") != fmt.Sprintf(`"%.0f"`, liked) {
		t.Fatalf("PUT answer %s, ETag %s", r.raw, r.header.Get("ETag"))
	}
	if _, err := time.Parse(time.RFC3339Nano, r.body["updateTime"].(string)); err != nil {
		t.Fatalf("updateTime: %v", err)
	}
	// The author's very next read includes the like, counted or not.
	c := call(t, "GET", base+"/v1/me/counts?ids=vid1,other", alice, "").want(t, 200)
	if countOf(c, "vid1", "likes") != 1 || c.header.Get("Cache-Control") != "private, no-store" {
		t.Fatalf("own read: %s (%s)", c.raw, c.header.Get("Cache-Control"))
	}
	viewer := c.body["viewer"].(map[string]any)["reactions"].(map[string]any)
	if viewer["vid1"].(map[string]any)["reaction"] != "like" || viewer["other"].(map[string]any)["reaction"] != "none" {
		t.Fatalf("viewer reactions %v", viewer)
	}
	// Everyone sees it within 5 s (HTTP → Pub/Sub push → Spanner).
	took := waitAnonymous(t, base, "vid1", "likes", 1, 5*time.Second)
	t.Logf("visible anonymously after %v", took)
	a := call(t, "GET", base+"/v1/counts?ids=vid1", "", "").want(t, 200)
	// COUNTS_MAX_AGE (2 s).
	if a.header.Get("Cache-Control") != "public, max-age=2" || a.body["viewer"] != nil || a.header.Get("Vary") != "" {
		t.Fatalf("anonymous answer %s, Cache-Control %q", a.raw, a.header.Get("Cache-Control"))
	}
	for _, f := range []string{"likes", "dislikes", "comments", "threads", "replies", "views"} {
		if _, ok := a.body["counts"].(map[string]any)["vid1"].(map[string]any)[f]; !ok {
			t.Fatalf("field %s missing: %s", f, a.raw)
		}
	}
	// Same reaction again: same version, no count change.
	call(t, "PUT", base+"/v1/reactions/vid1", alice, `{"reaction":"like"}`).want(t, 200)
	// If-Match.
	call(t, "PUT", base+"/v1/reactions/vid1", alice, `{"reaction":"dislike"}`, "If-Match", `"7"`).want(t, 412)
	r = call(t, "PUT", base+"/v1/reactions/vid1", alice, `{"reaction":"dislike"}`, "If-Match", fmt.Sprintf(`"%.0f"`, liked)).want(t, 200)
	if r.body["version"] != liked+1 {
		t.Fatalf("after If-Match: %s", r.raw)
	}
	g := call(t, "GET", base+"/v1/reactions?ids=vid1,vid2", alice, "").want(t, 200)
	want := fmt.Sprintf(`{"reactions":{"vid1":{"reaction":"dislike","version":%.0f},"vid2":{"reaction":"none","version":0}}}`, liked+1)
	if strings.TrimSpace(g.raw) != want {
		t.Fatalf("GET reactions %s, want %s", g.raw, want)
	}
	waitAnonymous(t, base, "vid1", "dislikes", 1, 5*time.Second)
	if a := call(t, "GET", base+"/v1/counts?ids=vid1", "", ""); countOf(a, "vid1", "likes") != 0 {
		t.Fatalf("like not removed: %s", a.raw)
	}

	// Bad requests.
	for _, c := range []struct {
		method, path, token, body string
		status                    int
	}{
		{"PUT", "/v1/reactions/vid1", "", `{"reaction":"like"}`, 401},
		{"PUT", "/v1/reactions/vid1", "garbage", `{"reaction":"like"}`, 401},
		{"PUT", "/v1/reactions/bad%20id", alice, `{"reaction":"like"}`, 400},
		{"PUT", "/v1/reactions/vid1", alice, `{"reaction":"love"}`, 400},
		{"PUT", "/v1/reactions/vid1", alice, `{}`, 400},
		{"PUT", "/v1/reactions/vid1", alice, `{"reaction":"like","x":1}`, 400},
		{"PUT", "/v1/reactions/vid1", alice, `{"reaction":`, 400},
		{"DELETE", "/v1/reactions/vid1", alice, "", 405},
		{"GET", "/v1/reactions", alice, "", 400},
		{"GET", "/v1/reactions?ids=a,b", "", "", 401},
		{"GET", "/v1/counts?ids=", "", "", 400},
		{"GET", "/v1/counts?ids=a/b", "", "", 400},
		{"GET", "/v1/me/counts?ids=a", "garbage", "", 401},
		{"GET", "/v1/me/counts?ids=a", "", "", 401},
		{"GET", "/v1/me/counts?ids=a/b", alice, "", 400},
		{"POST", "/v1/counts?ids=a", "", "", 405},
		{"POST", "/v1/me/counts?ids=a", alice, "", 405},
		{"POST", "/v1/moderation/flagged-users", alice, `{"userIds":["x"],"flagged":true}`, 403},
	} {
		r := call(t, c.method, base+c.path, c.token, c.body)
		if r.status != c.status || r.body["error"] == nil {
			t.Errorf("%s %s: %d %s, want %d with an error body", c.method, c.path, r.status, r.raw, c.status)
		}
	}
	ids := make([]string, 51)
	for i := range ids {
		ids[i] = fmt.Sprintf("i%d", i)
	}
	call(t, "GET", base+"/v1/counts?ids="+strings.Join(ids, ","), "", "").want(t, 400)
	c50 := call(t, "GET", base+"/v1/counts?ids="+strings.Join(ids[:50], ",")+",i0", "", "").want(t, 200)
	if n := len(c50.body["counts"].(map[string]any)); n != 50 {
		t.Fatalf("50 ids (one repeated) gave %d counts", n)
	}
}

func TestRateLimitOverHTTP(t *testing.T) {
	st, srv := newTestStack(t, "RATE_LIMIT_REACTIONS", "3")
	// The limit holds over any 60 seconds: the fourth change within them
	// is refused wherever the minute's end falls.
	tok := st.mustToken(t, "bob", false)
	for i := 0; i < 3; i++ {
		call(t, "PUT", fmt.Sprintf("%s/v1/reactions/v%d", srv.URL, i), tok, `{"reaction":"like"}`).want(t, 200)
	}
	r := call(t, "PUT", srv.URL+"/v1/reactions/v9", tok, `{"reaction":"like"}`)
	r.want(t, 429)
	if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("429 without Retry-After: %v", r.header)
	}
	if r.body["error"].(map[string]any)["status"] != "RESOURCE_EXHAUSTED" {
		t.Fatalf("429 body %s", r.raw)
	}
	// The refused change wrote nothing.
	g := call(t, "GET", srv.URL+"/v1/reactions?ids=v9", tok, "").want(t, 200)
	if !strings.Contains(g.raw, `"v9":{"reaction":"none","version":0}`) {
		t.Fatalf("a refused change was recorded: %s", g.raw)
	}
	// Another user is not limited.
	call(t, "PUT", srv.URL+"/v1/reactions/v9", st.mustToken(t, "carol", false), `{"reaction":"like"}`).want(t, 200)
}

func TestRateLimitsOff(t *testing.T) {
	st, srv := newTestStack(t, "RATE_LIMIT_REACTIONS", "1", "RATE_LIMITS", "off")
	tok := st.mustToken(t, "bob", false)
	for i := 0; i < 5; i++ {
		call(t, "PUT", fmt.Sprintf("%s/v1/reactions/v%d", srv.URL, i), tok, `{"reaction":"like"}`).want(t, 200)
	}
}

func TestModerationReconcileAndRollupOverHTTP(t *testing.T) {
	st, srv := newTestStack(t)
	base := srv.URL
	for _, u := range []string{"bot", "human"} {
		call(t, "PUT", base+"/v1/reactions/vid", st.mustToken(t, u, false), `{"reaction":"like"}`).want(t, 200)
	}
	waitAnonymous(t, base, "vid", "likes", 2, 5*time.Second)
	mod := st.mustToken(t, "mod", true)
	call(t, "POST", base+"/v1/moderation/flagged-users", mod, `{"userIds":[],"flagged":true}`).want(t, 400)
	call(t, "POST", base+"/v1/moderation/flagged-users", mod, `{"userIds":["bot"]}`).want(t, 400)
	r := call(t, "POST", base+"/v1/moderation/flagged-users", mod, `{"userIds":["bot","nobody"],"flagged":true}`).want(t, 200)
	if r.body["updated"] != 2.0 {
		t.Fatalf("flag answer %s", r.raw)
	}
	call(t, "POST", base+"/internal/reconcile", "", `{"scope":"weekly"}`).want(t, 400)
	rep := call(t, "POST", base+"/internal/reconcile", "", `{"scope":"recent"}`).want(t, 200)
	if rep.body["corrected"] != 1.0 {
		t.Fatalf("reconcile report %s", rep.raw)
	}
	waitAnonymous(t, base, "vid", "likes", 1, 3*time.Second)
	// The flagged account still sees its own reaction.
	g := call(t, "GET", base+"/v1/reactions?ids=vid", st.mustToken(t, "bot", false), "").want(t, 200)
	if !strings.Contains(g.raw, `"like"`) {
		t.Fatalf("flagged account's own reaction: %s", g.raw)
	}
	call(t, "POST", base+"/v1/moderation/flagged-users", mod, `{"userIds":["bot"],"flagged":false}`).want(t, 200)
	call(t, "POST", base+"/internal/reconcile", "", `{"scope":"all"}`).want(t, 200)
	waitAnonymous(t, base, "vid", "likes", 2, 3*time.Second)

	ro := call(t, "POST", base+"/internal/rollup", "", `{"once":true}`).want(t, 200)
	if ro.body["ticks"] != 1.0 {
		t.Fatalf("rollup answer %s", ro.raw)
	}
	waitAnonymous(t, base, "vid", "likes", 2, time.Second)
}

// TestViewsFromHistoryEvents: watches published on the history topic, in
// batches and in the single-watch form of before, are counted once each by
// ApplyViews (the same watch in several messages too), with their unique
// viewers; a message of neither form is refused, not retried forever.
func TestViewsFromHistoryEvents(t *testing.T) {
	srv, err := benchstack.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg := emulatortest.New(t, emulatortest.WithPushEndpoint(srv.PushEndpoint))
	ctx := context.Background()
	st, closeStack, err := newViewsStack(ctx, cfg, srv, deployed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStack)
	pub := st.Clients.PubSub.Publisher(st.Config.PubSub.HistoryTopic)
	defer pub.Stop()
	at := time.Now().Add(-time.Minute)
	w1, w2, w3 := history.NewWatch("u1", "vidv", at, 10), history.NewWatch("u2", "vidv", at, 0), history.NewWatch("u3", "vidv", at, 0)
	var msgs [][]byte
	for _, w := range []history.Watch{w1, w1, w2} { // the same watch twice
		b, err := w.Encode()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, b)
	}
	b, err := history.NewBatch([]history.Watch{w1, w3}).Encode() // w1 a third time
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, b, []byte(`{"nonsense":true}`))
	for _, m := range msgs {
		if _, err := pub.Publish(ctx, &pubsub.Message{Data: m}).Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitAnonymous(t, srv.URL, "vidv", "views", 3, 10*time.Second)
	waitAnonymous(t, srv.URL, "vidv", "uniqueViewers", 3, time.Second)
	time.Sleep(500 * time.Millisecond)
	waitAnonymous(t, srv.URL, "vidv", "views", 3, time.Second)
}
