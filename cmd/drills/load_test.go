package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/videngage/engagement/cmd/soak/workload"
)

// viewWindow is the drills' stacks' viewing window (TestMain).
var viewWindow time.Duration

// startLoad starts a mixed load (the soak's) on the stack, with tokens from
// its local issuer.
func startLoad(st *drillStack, spec workload.Spec) *workload.Load {
	st.t.Helper()
	spec.ViewWindow = viewWindow
	tokens := func(uid string, moderator bool) (string, error) {
		if moderator {
			return st.issuer.Mint(uid, localauth.Moderator())
		}
		return st.issuer.Mint(uid)
	}
	l, err := workload.Start(st.api, tokens, spec)
	if err != nil {
		st.t.Fatal(err)
	}
	st.t.Logf("load: %d reactors, %d watchers, %d commenters, %d readers on %d keys (seed %d)",
		spec.Reactors, spec.Watchers, spec.Commenters, spec.Readers, len(spec.Keys), l.Seed)
	return l
}

// finish stops the load, waits for the writes in progress to be accepted
// and fails the test for the writes that never were.
func finish(t *testing.T, l *workload.Load) {
	t.Helper()
	for _, err := range l.Stop() {
		t.Error(err)
	}
	t.Logf("load: %d writes accepted", l.Model.Accepted())
}

// checkAnswers checks every answer of the load against the spec's promises
// under failure: no 500 (or any 5xx but 503), every 503 with Retry-After, an
// answer for every request, none later than the request deadline (plus
// slack for a loaded machine).
func checkAnswers(t *testing.T, samples []workload.Sample, deadline time.Duration) {
	t.Helper()
	if bad := workload.Violations(samples, deadline, 2500*time.Millisecond); len(bad) > 0 {
		if len(bad) > 20 {
			bad = append(bad[:20], fmt.Sprintf("… and %d more", len(bad)-20))
		}
		t.Errorf("answers that break the spec:\n%s", strings.Join(bad, "\n"))
	}
	t.Logf("answers: %s", workload.Summary(samples))
}

// keys returns n counter keys (video ids).
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("video-%d", i)
	}
	return out
}
