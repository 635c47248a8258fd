package commentsfn_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/errs"
)

// The young-account rule fails closed: while the identity provider's
// records do not answer, a post is refused with 503 and Retry-After (the
// author's age is unknown) and nothing is posted or counted.
func TestYoungAccountRuleFailsClosed(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	records := auth.NewAccountRecordsWith(down.Client(), down.URL, audience)
	e := newEnv(t, envOpts{limit: 10, spam: comment.SpamRules{YoungAge: 24 * time.Hour},
		accounts: auth.NewYoungAccounts(auth.NewAccountCreation(records, 10), 24*time.Hour)})
	r := e.do("POST", "/v1/videos/fc/comments", e.token("fc-author"), `{"text":"see example.com/me"}`)
	apitest.CheckError(t, "a post while the account records are down", r, http.StatusServiceUnavailable, "UNAVAILABLE", errs.BackendUnavailable)
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("503 without Retry-After: %v", r.Header)
	}
	if got := e.counts("", "fc")["fc"].Comments; got != 0 {
		t.Errorf("%d comments counted, want 0", got)
	}
}
