package reactionsfn_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reactionsfn "github.com/videngage/engagement/functions/reactions"
	"github.com/videngage/engagement/internal/localauth"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/errs"
)

// firstN admits each user's first n reactions and no more: the young
// accounts' limit, which ratelimit's own tests cover.
type firstN struct {
	mu   sync.Mutex
	n    int
	seen map[string]int
}

func (l *firstN) Allow(_ context.Context, uid string) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[uid] >= l.n {
		return time.Minute, nil
	}
	l.seen[uid]++
	return 0, nil
}

// The young-account rule applies to reactions: a young account is held to
// the young limit (429 beyond it), an established one (or one with no
// record) is not, and while the account records do not answer a reaction
// of an account not seen yet is refused with 503 and Retry-After (the rule
// fails closed), and nothing is written.
func TestYoungAccountsReactions(t *testing.T) {
	is, err := issuer()
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	accounts := is.AccountsHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		accounts.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	young := auth.NewYoungAccounts(auth.NewAccountCreation(auth.NewAccountRecordsWith(srv.Client(), srv.URL, audience), 100), 24*time.Hour)
	e := newEnvWith(t, 100, func(d *reactionsfn.Deps) {
		d.Young, d.YoungLimiter = young, &firstN{n: 2, seen: map[string]int{}}
	})
	now := time.Now()
	for uid, age := range map[string]time.Duration{"yr-newbie": time.Hour, "yr-elder": 48 * time.Hour} {
		if _, err := is.Mint(uid, localauth.AccountCreated(now.Add(-age))); err != nil {
			t.Fatal(err)
		}
	}
	for _, item := range []string{"yr-a", "yr-b"} {
		e.put("yr-newbie", item, "like").want(t, http.StatusOK, "", "")
	}
	r := e.put("yr-newbie", "yr-c", "like").want(t, http.StatusTooManyRequests, "", "RESOURCE_EXHAUSTED", errs.RateLimited)
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("429 without Retry-After: %v", r.Header)
	}
	for _, uid := range []string{"yr-elder", "yr-unrecorded"} {
		for _, item := range []string{"yr-a", "yr-b", "yr-c"} {
			e.put(uid, item, "like").want(t, http.StatusOK, "", "")
		}
	}
	down.Store(true)
	r = e.put("yr-unseen", "yr-d", "like").want(t, http.StatusServiceUnavailable, "", "UNAVAILABLE", errs.BackendUnavailable)
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("503 without Retry-After: %v", r.Header)
	}
	// Nothing was written: once the records answer, the same reaction
	// still finds no row (If-Match "0", the version of no reaction).
	down.Store(false)
	e.put("yr-unseen", "yr-d", "like", "If-Match", `"0"`).want(t, http.StatusOK, "", "")
}
