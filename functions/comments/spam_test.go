package commentsfn_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/localauth"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/errs"
)

// TestDuplicateTextRefused: a user's same text again, on any video and
// whatever its case, spacing or link, is a 400 that posts and counts
// nothing and leaves the rate limit as it was; a retry with the post's
// Idempotency-Key is the post, not a duplicate; another user's same text is
// theirs.
func TestDuplicateTextRefused(t *testing.T) {
	t.Parallel()
	// 4 a minute: 2 at once, then one every 20 s.
	e := newEnv(t, envOpts{limit: 4, spam: comment.SpamRules{DuplicateWindow: 10 * time.Minute}})
	path := func(video string) string { return "/v1/videos/" + video + "/comments" }
	const spam = `{"text":"Free followers at bit.ly/abc"}`
	var first commentJSON
	apitest.DecodeStrict(t, e.do("POST", path("v1"), e.token("alice"), spam, "Idempotency-Key", "k1").Want(t, 201, "first").Body, &first)
	for _, c := range []struct{ video, body string }{
		{"v1", spam},
		{"v2", spam},
		{"v3", `{"text":"  FREE followers   at https://other.example/x "}`},
	} {
		r := e.do("POST", path(c.video), e.token("alice"), c.body)
		apitest.CheckError(t, "the same text on "+c.video, r, http.StatusBadRequest, "INVALID_ARGUMENT", errs.DuplicateComment)
	}
	// The retry of the first post answers the first comment.
	var again commentJSON
	apitest.DecodeStrict(t, e.do("POST", path("v1"), e.token("alice"), spam, "Idempotency-Key", "k1").Want(t, 201, "retry").Body, &again)
	if again.ID != first.ID {
		t.Errorf("the retry answered %s, want the first comment %s", again.ID, first.ID)
	}
	// The refusals were not charged: the burst's second post goes through.
	e.post("alice", "v2", "", "a comment of my own")
	e.post("bob", "v3", "", "Free followers at bit.ly/abc")
	for video, want := range map[string]int64{"v1": 1, "v2": 1, "v3": 1} {
		if got := e.counts("", video)[video].Comments; got != want {
			t.Errorf("%s counts %d comments, want %d", video, got, want)
		}
	}
	e.exact("v1", "v2", "v3")
}

// TestYoungAccounts: an account the identity provider created less than a
// day ago posts no links (400) and at most 2 comments a minute (429); an
// older account, or one the provider has no record of, posts as before.
func TestYoungAccounts(t *testing.T) {
	t.Parallel()
	// Everyone 10 a minute (5 at once); young accounts 2 (1 at once).
	e := newEnv(t, envOpts{limit: 10, youngLimit: 2, spam: comment.SpamRules{YoungAge: 24 * time.Hour}, accountRecords: true})
	now := time.Now()
	young := e.token("young-newbie", localauth.AccountCreated(now.Add(-time.Hour)))
	old := e.token("young-elder", localauth.AccountCreated(now.Add(-48*time.Hour)))
	unknown := e.token("young-unrecorded")
	path := "/v1/videos/yv/comments"
	const link = `{"text":"my channel: example.com/me"}`
	apitest.CheckError(t, "a young account's link", e.do("POST", path, young, link), http.StatusBadRequest, "INVALID_ARGUMENT", errs.YoungAccountLinks)
	e.do("POST", path, young, `{"text":"hello"}`).Want(t, http.StatusCreated, "a young account's first comment")
	r := e.do("POST", path, young, `{"text":"hello again"}`)
	apitest.CheckError(t, "a young account's second comment at once", r, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", errs.RateLimited)
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("429 without Retry-After: %v", r.Header)
	}
	for _, tok := range []string{old, unknown} {
		e.do("POST", path, tok, link).Want(t, http.StatusCreated, "an established account's link")
		e.do("POST", path, tok, `{"text":"and more"}`).Want(t, http.StatusCreated, "an established account's second comment")
	}
	if got := e.counts("", "yv")["yv"].Comments; got != 5 {
		t.Errorf("%d comments counted, want 5", got)
	}
	e.exact("yv")
}
