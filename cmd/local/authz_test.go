package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/errs"
	"gopkg.in/yaml.v3"
)

// Identities of the authorization matrix: the caller of each request.
const (
	noToken       = "no token"
	expired       = "expired"        // the stack's key, exp an hour ago
	wrongAudience = "wrong audience" // the stack's key, aud of another project
	wrongKey      = "wrong key"      // a key the stack does not publish
	user          = "user"           // authz-alice
	otherUser     = "other user"     // authz-bob
	moderator     = "moderator"      // authz-mod, with "moderator": true
)

// The tests of this binary share one project (startLocal): the matrix's
// users are its own, so that no other test sees their rows.
const (
	alice = "authz-alice"
	bob   = "authz-bob"
	mod   = "authz-mod"
)

var identities = []string{noToken, expired, wrongAudience, wrongKey, user, otherUser, moderator}

// each is a route's rows, one per identity: status holds, in the order of
// identities, the status each of them gets for the same request.
func each(route, path, body string, status ...int) []authzRow {
	if len(status) != len(identities) {
		panic(fmt.Sprintf("%s: %d statuses for %d identities", route, len(status), len(identities)))
	}
	rows := make([]authzRow, len(identities))
	for i, who := range identities {
		rows[i] = authzRow{route, who, path, body, status[i]}
	}
	return rows
}

// authzRow is one request of the matrix and the status the spec gives it.
// path and body are concrete; route is the OpenAPI route they exercise.
type authzRow struct {
	route  string // "PUT /v1/reactions/{contentId}"
	who    string
	path   string
	body   string
	status int
}

// startLocalWithIssuer starts the stack and returns its base URL and its
// token issuer, so that bad tokens can be signed with the stack's own key.
func startLocalWithIssuer(t *testing.T) (string, *localauth.Issuer) {
	t.Helper()
	var (
		mu     sync.Mutex
		issuer *localauth.Issuer
	)
	newIssuer = func(audience string) (*localauth.Issuer, error) {
		i, err := localauth.New(audience)
		mu.Lock()
		issuer = i
		mu.Unlock()
		return i, err
	}
	t.Cleanup(func() { newIssuer = localauth.New })
	base := startLocal(t)
	mu.Lock()
	defer mu.Unlock()
	if issuer == nil {
		t.Fatal("the stack did not build its issuer through newIssuer")
	}
	return base, issuer
}

// matrixTokens mints the token of every identity (none for noToken).
func matrixTokens(t *testing.T, base string, stack *localauth.Issuer) map[string]string {
	t.Helper()
	mint := func(i *localauth.Issuer, uid string, opts ...localauth.MintOption) string {
		tok, err := i.Mint(uid, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// Control: the same issuer's token without a defect is accepted, so the
	// expired and wrong-audience rows fail for their one defect.
	if code, _, body := (client{t: t, base: base, token: mint(stack, alice)}).do("GET", "/v1/history/settings", ""); code != 200 {
		t.Fatalf("a good token of the stack's issuer: %d %s", code, body)
	}
	stranger, err := localauth.New(os.Getenv("GOOGLE_CLOUD_PROJECT"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		noToken:       "",
		expired:       mint(stack, alice, localauth.IssuedAt(time.Now().Add(-2*time.Hour))),
		wrongAudience: mint(stack, alice, localauth.Audience("another-project")),
		wrongKey:      mint(stranger, alice),
		// Valid tokens come from /dev/token, as for any caller of the stack.
		user:      token(t, base, alice),
		otherUser: token(t, base, bob),
		moderator: tokenFor(t, base, url.Values{"uid": {mod}, "moderator": {"true"}}),
	}
}

// TestAuthorizationMatrix sends every route of the public API (docs/openapi.yaml)
// as every identity and checks the status the spec gives, with the error
// body's status name: 401 UNAUTHENTICATED without a valid token where a
// token is required (and for a bad token where one is optional), 403
// PERMISSION_DENIED for moderation by a user, success otherwise.
func TestAuthorizationMatrix(t *testing.T) {
	base, stack := startLocalWithIssuer(t)
	tokens := matrixTokens(t, base, stack)

	const (
		content = "authz-video"
		flag    = `{"userIds":["authz-nobody"],"flagged":false}`
		put     = `{"reaction":"like"}`
		watch   = `{"videoId":"authz-video","positionSeconds":1}`
		prefs   = `{"paused":false,"autoDeleteMonths":0}`
	)
	// Statuses for: no token, expired, wrong audience, wrong key, user,
	// other user, moderator.
	rows := slices.Concat(
		each("PUT /v1/reactions/{contentId}", "/v1/reactions/"+content, put, 401, 401, 401, 401, 200, 200, 200),
		each("GET /v1/reactions", "/v1/reactions?ids="+content, "", 401, 401, 401, 401, 200, 200, 200),
		each("POST /v1/moderation/flagged-users", "/v1/moderation/flagged-users", flag, 401, 401, 401, 401, 403, 403, 200),
		each("GET /v1/moderation/flagged-users", "/v1/moderation/flagged-users?pageSize=5", "", 401, 401, 401, 401, 403, 403, 200),
		each("GET /v1/moderation/actions", "/v1/moderation/actions?pageSize=5", "", 401, 401, 401, 401, 403, 403, 200),
		// Public: the same answer whatever token is sent, even a bad one.
		each("GET /v1/counts", "/v1/counts?ids="+content, "", 200, 200, 200, 200, 200, 200, 200),
		each("GET /v1/me/counts", "/v1/me/counts?ids="+content, "", 401, 401, 401, 401, 200, 200, 200),
		each("POST /v1/history", "/v1/history", watch, 401, 401, 401, 401, 202, 202, 202),
		each("GET /v1/history", "/v1/history", "", 401, 401, 401, 401, 200, 200, 200),
		each("DELETE /v1/history/{videoId}", "/v1/history/"+content, "", 401, 401, 401, 401, 204, 204, 204),
		each("DELETE /v1/history", "/v1/history", "", 401, 401, 401, 401, 204, 204, 204),
		each("GET /v1/history/settings", "/v1/history/settings", "", 401, 401, 401, 401, 200, 200, 200),
		each("PUT /v1/history/settings", "/v1/history/settings", prefs, 401, 401, 401, 401, 200, 200, 200),
		each("GET /v1/me/export", "/v1/me/export", "", 401, 401, 401, 401, 200, 200, 200),
	)

	rows = append(rows, commentRows(t, base, tokens)...)
	// Erasing the matrix's own accounts comes last: their writes are
	// refused from then on.
	erase := each("DELETE /v1/me", "/v1/me", "", 401, 401, 401, 401, 202, 202, 202)
	checkCoverage(t, slices.Concat(rows, erase))

	for _, r := range rows {
		method, _, _ := strings.Cut(r.route, " ")
		c := client{t: t, base: base, token: tokens[r.who]}
		code, hdr, body := c.do(method, r.path, r.body)
		checkAnswer(t, fmt.Sprintf("%s %s as %s", method, r.path, r.who), code, hdr, body, r.status, r.reason())
	}

	t.Run("public counts are the same for everyone, the viewer's only on /v1/me/counts", func(t *testing.T) {
		for _, who := range []string{noToken, wrongKey, user} {
			c := client{t: t, base: base, token: tokens[who]}
			code, hdr, body := c.do("GET", "/v1/counts?ids="+content, "")
			if code != 200 || strings.Contains(body, `"viewer"`) || !strings.Contains(body, `"uniqueViewers":`) || !strings.HasPrefix(hdr.Get("Cache-Control"), "public") ||
				strings.Contains(hdr.Get("Vary"), "Authorization") {
				t.Errorf("public counts as %q: %d Cache-Control %q Vary %q %s", who, code, hdr.Get("Cache-Control"), hdr.Get("Vary"), body)
			}
		}
		signedIn := client{t: t, base: base, token: tokens[user]}
		code, hdr, body := signedIn.do("GET", "/v1/me/counts?ids="+content, "")
		if code != 200 || !strings.Contains(body, `"viewer":{"reactions":{"authz-video":{"reaction":"like"`) || !strings.Contains(body, `"uniqueViewers":`) ||
			hdr.Get("Cache-Control") != "private, no-store" {
			t.Errorf("the user's counts: %d Cache-Control %q %s", code, hdr.Get("Cache-Control"), body)
		}
	})

	t.Run("another user never reads or deletes someone's history", func(t *testing.T) {
		historyIsolation(t, base, tokens)
	})

	t.Run("comments", func(t *testing.T) {
		commentIsolation(t, base, tokens)
	})

	for _, r := range erase {
		c := client{t: t, base: base, token: tokens[r.who]}
		code, hdr, body := c.do("DELETE", r.path, r.body)
		checkAnswer(t, fmt.Sprintf("DELETE %s as %s", r.path, r.who), code, hdr, body, r.status, r.reason())
	}
}

// reason is the error reason the spec gives the row's refusal: by the
// token's defect for a 401, by the rule for a 403; none for a success.
func (r authzRow) reason() errs.Reason {
	switch {
	case r.status == 401 && r.who == noToken:
		return errs.TokenMissing
	case r.status == 401 && r.who == expired:
		return errs.TokenExpired
	case r.status == 401:
		return errs.TokenInvalid
	case r.status == 403 && strings.Contains(r.route, "/v1/moderation/"):
		return errs.NotModerator
	case r.status == 403 && strings.HasPrefix(r.route, "DELETE /v1/comments/"):
		return errs.NotAuthor
	}
	return ""
}

// checkAnswer checks a status and, for an error, the spec's error body with
// its reason.
func checkAnswer(t *testing.T, what string, code int, hdr http.Header, body string, want int, reason errs.Reason) {
	t.Helper()
	if code != want {
		t.Errorf("%s: %d, want %d (%s)", what, code, want, body)
		return
	}
	if code < 400 {
		return
	}
	wantStatus := map[int]string{401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}[want]
	apitest.CheckError(t, what, apitest.Answer{Code: code, Header: hdr, Body: []byte(body)}, want, wantStatus, reason)
	if want == 401 && hdr.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("%s: WWW-Authenticate %q, want Bearer", what, hdr.Get("WWW-Authenticate"))
	}
}

// checkCoverage fails when a route of docs/openapi.yaml lacks a row for some
// identity.
func checkCoverage(t *testing.T, rows []authzRow) {
	t.Helper()
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatalf("the route list: %v", err)
	}
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	covered := map[string]map[string]bool{}
	for _, r := range rows {
		if covered[r.route] == nil {
			covered[r.route] = map[string]bool{}
		}
		covered[r.route][r.who] = true
	}
	var routes []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "put", "post", "delete", "patch":
				routes = append(routes, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(routes)
	for _, route := range routes {
		for _, who := range identities {
			if !covered[route][who] {
				t.Errorf("the matrix has no row for %s as %s", route, who)
			}
		}
		delete(covered, route)
	}
	for route := range covered {
		t.Errorf("the matrix has rows for %s, which docs/openapi.yaml does not list", route)
	}
}

// historyIsolation: history is addressed by the token alone, so bob and a
// moderator, whatever they send, neither see nor remove alice's entries.
func historyIsolation(t *testing.T, base string, tokens map[string]string) {
	owner := client{t: t, base: base, token: tokens[user]}
	const secret = "authz-alice-only"
	if code, _, body := owner.do("POST", "/v1/history", `{"videoId":"`+secret+`"}`); code != 202 {
		t.Fatalf("alice's watch: %d %s", code, body)
	}
	aliceSees := func() bool {
		code, _, body := owner.do("GET", "/v1/history", "")
		if code != 200 {
			t.Fatalf("alice's history: %d %s", code, body)
		}
		return strings.Contains(body, secret)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !aliceSees() {
		if time.Now().After(deadline) {
			t.Fatal("alice's watch not in her history within 15 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, who := range []string{otherUser, moderator} {
		c := client{t: t, base: base, token: tokens[who]}
		for _, path := range []string{"/v1/history", "/v1/history?userId=" + alice, "/v1/history?pageSize=100"} {
			if code, _, body := c.do("GET", path, ""); code != 200 && code != 400 || strings.Contains(body, secret) {
				t.Errorf("GET %s as %s: %d %s", path, who, code, body)
			}
		}
		for _, path := range []string{"/v1/history/" + secret, "/v1/history"} {
			if code, _, body := c.do("DELETE", path, ""); code != 204 {
				t.Errorf("DELETE %s as %s: %d %s", path, who, code, body)
			}
		}
	}
	// The deletes above went to bob's and mod's own histories.
	if !aliceSees() {
		t.Error("alice's entry is gone after other users' deletes")
	}
}

// commentRows are the matrix rows of the comments routes. The comments that
// the allowed deletes and the spam sweep act on are posted first, one per
// row, by alice; rows refused before any lookup name a comment that does not
// exist.
func commentRows(t *testing.T, base string, tokens map[string]string) []authzRow {
	t.Helper()
	post := func(who string) string { return postComment(t, base, tokens[who], "authz-video") }
	thread := post(user)
	byBob, byAliceForBob, byAliceForMod, spam := post(otherUser), post(user), post(user), post(user)
	const (
		comment = `{"text":"hello"}`
		nowhere = "authz-no-such-comment"
	)
	spamOf := func(id string) string { return `{"commentIds":["` + id + `"]}` }
	return slices.Concat(
		each("POST /v1/videos/{videoId}/comments", "/v1/videos/authz-video/comments", comment, 401, 401, 401, 401, 201, 201, 201),
		// Listings need no token and look at none: any Authorization is ignored.
		each("GET /v1/videos/{videoId}/comments", "/v1/videos/authz-video/comments", "", 200, 200, 200, 200, 200, 200, 200),
		each("GET /v1/comments/{commentId}/replies", "/v1/comments/"+thread+"/replies", "", 200, 200, 200, 200, 200, 200, 200),
		[]authzRow{
			{"DELETE /v1/comments/{commentId}", noToken, "/v1/comments/" + byBob, "", 401},
			{"DELETE /v1/comments/{commentId}", expired, "/v1/comments/" + byBob, "", 401},
			{"DELETE /v1/comments/{commentId}", wrongAudience, "/v1/comments/" + byBob, "", 401},
			{"DELETE /v1/comments/{commentId}", wrongKey, "/v1/comments/" + byBob, "", 401},
			{"DELETE /v1/comments/{commentId}", otherUser, "/v1/comments/" + byAliceForBob, "", 403}, // not the author
			{"DELETE /v1/comments/{commentId}", user, "/v1/comments/" + byBob, "", 403},              // not the author
			{"DELETE /v1/comments/{commentId}", user, "/v1/comments/" + byAliceForBob, "", 204},      // the author
			{"DELETE /v1/comments/{commentId}", moderator, "/v1/comments/" + byAliceForMod, "", 204},
			{"DELETE /v1/comments/{commentId}", otherUser, "/v1/comments/" + byBob, "", 204}, // the author

			{"POST /v1/moderation/spam", noToken, "/v1/moderation/spam", spamOf(nowhere), 401},
			{"POST /v1/moderation/spam", expired, "/v1/moderation/spam", spamOf(nowhere), 401},
			{"POST /v1/moderation/spam", wrongAudience, "/v1/moderation/spam", spamOf(nowhere), 401},
			{"POST /v1/moderation/spam", wrongKey, "/v1/moderation/spam", spamOf(nowhere), 401},
			{"POST /v1/moderation/spam", user, "/v1/moderation/spam", spamOf(spam), 403},
			{"POST /v1/moderation/spam", otherUser, "/v1/moderation/spam", spamOf(spam), 403},
			{"POST /v1/moderation/spam", moderator, "/v1/moderation/spam", spamOf(spam), 200},
		},
	)
}

// postedComments numbers the texts of postComment.
var postedComments atomic.Int64

// postComment posts a comment on video and returns its id. Each text is new:
// a user's same text again is refused as a duplicate.
func postComment(t *testing.T, base, tok, video string) string {
	t.Helper()
	text := fmt.Sprintf(`{"text":"authz %d"}`, postedComments.Add(1))
	code, _, resp := client{t: t, base: base, token: tok}.do("POST", "/v1/videos/"+video+"/comments", text)
	if code != 201 {
		t.Fatalf("posting a comment: %d %s", code, resp)
	}
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(resp), &c); err != nil || c.ID == "" {
		t.Fatalf("posted comment %s: %v", resp, err)
	}
	return c.ID
}

// commentIsolation: a comment that another user failed to delete is still
// listed; one its author deleted is not. The author is the moderator, who
// posts least in the matrix, so that no one's posts exceed the per-user
// burst of comments.
func commentIsolation(t *testing.T, base string, tokens map[string]string) {
	owner := client{t: t, base: base, token: tokens[moderator]}
	other := client{t: t, base: base, token: tokens[otherUser]}
	kept := postComment(t, base, tokens[moderator], "authz-isolation")
	gone := postComment(t, base, tokens[moderator], "authz-isolation")
	if code, _, body := other.do("DELETE", "/v1/comments/"+kept, ""); code != 403 {
		t.Fatalf("bob deleting mod's comment: %d %s", code, body)
	}
	if code, _, body := owner.do("DELETE", "/v1/comments/"+gone, ""); code != 204 {
		t.Fatalf("mod deleting their own comment: %d %s", code, body)
	}
	code, _, body := client{t: t, base: base}.do("GET", "/v1/videos/authz-isolation/comments", "")
	if code != 200 || !strings.Contains(body, kept) || strings.Contains(body, gone) {
		t.Errorf("listing after the deletes: %d %s; want %s listed and %s not", code, body, kept, gone)
	}
}
