package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	"github.com/videngage/engagement/functions/host"
)

// detectionAhead runs the stack's DetectManipulation, the deployed
// function's Deps, on a clock the test moves ahead of the wall clock: a
// step of reactions is merged 5 minutes after it starts, and a group is
// flagged once a whole window (15 minutes) has passed after its last
// reaction, which a test does not wait for.
func detectionAhead(t *testing.T) *atomic.Int64 {
	t.Helper()
	var ahead atomic.Int64
	replaceFunctions = func(ctx context.Context, c *host.Clients) (map[string]http.Handler, error) {
		d, err := detectmanipulationfn.DepsOf(ctx, c)
		if err != nil {
			return nil, err
		}
		d.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
		return map[string]http.Handler{"DetectManipulation": detectmanipulationfn.New(d)}, nil
	}
	t.Cleanup(func() {
		replaceFunctions = func(context.Context, *host.Clients) (map[string]http.Handler, error) { return nil, nil }
	})
	return &ahead
}

// ageToken mints uid's token at the stack, its account created age ago in
// the stack's account records (what the detection ages accounts by).
func ageToken(t *testing.T, base, uid string, age time.Duration, moderator bool) string {
	t.Helper()
	q := url.Values{"uid": {uid}, "accountAge": {age.String()}}
	if moderator {
		q.Set("moderator", "true")
	}
	return tokenFor(t, base, q)
}

// A ring of 30 accounts created two days ago likes the same 4 obscure
// videos within a minute, among 320 accounts a year old that like a few
// videos of a catalogue each, 250 of them one viral video too, all through
// the public API. The stack's own detection job, run as its scheduler
// runs it on a clock moved past the ring's window, flags the whole ring
// with reason "automatic" once a window has passed after it acted, and
// none of the ordinary accounts.
func TestLocalStackDetectionFlagsARing(t *testing.T) {
	ahead := detectionAhead(t)
	base := startLocal(t)

	const (
		ringSize  = 30
		ringItems = 4
		ordinary  = 320
		viral     = 250
		catalogue = 60
		perUser   = 2
	)
	type write struct{ uid, content string }
	var (
		writes []write
		ring   = map[string]bool{}
		users  = map[string]time.Duration{}
	)
	r := rand.New(rand.NewPCG(36, 0))
	for i := range ordinary {
		u := fmt.Sprintf("detect-user-%d", i)
		users[u] = 365 * 24 * time.Hour
		for _, c := range r.Perm(catalogue)[:perUser] {
			writes = append(writes, write{u, fmt.Sprintf("detect-cat-%d", c)})
		}
		if i < viral {
			writes = append(writes, write{u, "detect-viral"})
		}
	}
	for i := range ringSize {
		u := fmt.Sprintf("detect-ring-%d", i)
		users[u], ring[u] = 48*time.Hour, true
		for j := range ringItems {
			writes = append(writes, write{u, fmt.Sprintf("detect-obscure-%d", j)})
		}
	}
	r.Shuffle(len(writes), func(i, j int) { writes[i], writes[j] = writes[j], writes[i] })

	started := time.Now()
	tokens := map[string]string{}
	for u, age := range users {
		tokens[u] = ageToken(t, base, u, age, false)
	}
	var wg sync.WaitGroup
	work := make(chan write)
	for range 8 {
		wg.Go(func() {
			for w := range work {
				c := client{t: t, base: base, token: tokens[w.uid]}
				if code, _, body := c.do("PUT", "/v1/reactions/"+w.content, `{"reaction":"like"}`); code != 200 {
					t.Errorf("PUT %s as %s: %d %s", w.content, w.uid, code, body)
				}
			}
		})
	}
	for _, w := range writes {
		work <- w
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d reactions of %d accounts written in %v", len(writes), len(users), time.Since(started))

	// The job's clock moves a minute a run, as the scheduler calls it,
	// past the ring's window and the step after it; the scheduler's own
	// runs and the test's share the steps under their leases.
	mod := client{t: t, base: base, token: ageToken(t, base, "detect-mod", 365*24*time.Hour, true)}
	anon := client{t: t, base: base}
	var flags map[string]string
	lookedEarly := false
	for minute := range 22 {
		ahead.Store(int64(time.Duration(minute) * time.Minute))
		code, _, body := anon.do("POST", "/internal/detect-manipulation", "")
		if code != 200 {
			t.Fatalf("POST /internal/detect-manipulation: %d %s", code, body)
		}
		t.Logf("run at +%dm: %s", minute, body)
		// A group is flagged once a window (15 minutes) has passed after
		// its last reaction, all of which came after started. A flag
		// stays, so one look at the last run before the window has passed
		// shows whether any came early (a look a minute would exceed the
		// moderator's rate limit).
		before := func(m int) bool {
			return time.Now().Add(time.Duration(m) * time.Minute).Before(started.Add(15 * time.Minute))
		}
		if before(minute) && !before(minute+1) {
			lookedEarly = true
			for u, why := range flaggedUsers(t, mod) {
				if ring[u] {
					t.Fatalf("+%dm: ring member %s flagged (%s) before the ring's window passed", minute, u, why)
				}
			}
		}
	}
	if !lookedEarly {
		t.Fatal("no run came just before the ring's window passed")
	}
	flags = flaggedUsers(t, mod)
	for u := range ring {
		if flags[u] != "automatic" {
			t.Errorf("ring member %s: flagged %q, want automatic", u, flags[u])
		}
	}
	for u := range users {
		if !ring[u] && flags[u] != "" {
			t.Errorf("ordinary account %s flagged (%s)", u, flags[u])
		}
	}
	// The flagged ring's likes stop counting at the next reconciliation,
	// run now: the stack's other tests find its counts settled.
	if code, _, body := anon.do("POST", "/internal/reconcile", ""); code != 200 {
		t.Fatalf("POST /internal/reconcile: %d %s", code, body)
	}
	want := map[string]map[string]int64{}
	for i := range ringItems {
		want[fmt.Sprintf("detect-obscure-%d", i)] = map[string]int64{"likes": 0}
	}
	waitCounts(t, base, want)
}

// flaggedUsers reads every flagged account and its reason, as a moderator.
func flaggedUsers(t *testing.T, mod client) map[string]string {
	t.Helper()
	out := map[string]string{}
	page := ""
	for {
		path := "/v1/moderation/flagged-users?pageSize=100"
		if page != "" {
			path += "&pageToken=" + url.QueryEscape(page)
		}
		code, _, body := mod.do("GET", path, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		var v struct {
			Users []struct {
				UserID string `json:"userId"`
				Reason string `json:"reason"`
			} `json:"users"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		for _, u := range v.Users {
			out[u.UserID] = u.Reason
		}
		if v.NextPageToken == "" {
			return out
		}
		page = v.NextPageToken
	}
}
