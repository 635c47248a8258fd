package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/ratelimit"
)

// regionLostWrites are the writes of the load whose answers the drill
// counts, with the answer that accepts each.
var regionLostWrites = []struct {
	op   string
	code int
}{
	{"PUT /v1/reactions", 200},
	{"POST /v1/videos/{videoId}/comments", 201},
	{"POST /v1/history", 202},
}

// Drill 4c. The transactional Bigtable cluster is lost: Bigtable stops
// answering for 30 s under reactions, comments and watches, with the
// per-user rate limits on (their store is Bigtable's transactional
// profile). Every write is still accepted — the limits fall back to each
// instance's own — none is answered 503, and once Bigtable is back nothing
// is lost: every accepted watch is in its user's history, every count is
// exact (drift 0) and a reconciliation corrects nothing. The figures:
// writes accepted during the freeze by type, answers by status, drift.
func TestDrillTransactionalBigtableLost(t *testing.T) {
	st := startStack(t, stackOptions{env: map[string]string{
		// The deployed deadline, not the drills' short one: a write slowed
		// by a loaded machine's Spanner emulator must not pass for one
		// refused for want of Bigtable (which would wait this long).
		"REQUEST_TIMEOUT": "10s",
		"RATE_LIMITS":     "on",
		// Limits the load never reaches: every refusal would be the
		// limiter's failure, not the user's excess.
		"RATE_LIMIT_REACTIONS": "100000",
		"RATE_LIMIT_COMMENTS":  "100000",
		"RATE_LIMIT_HISTORY":   "100000",
	}})
	degradedBefore := logLines(t, ratelimit.LogDegraded)
	l := startLoad(st, workload.Spec{Reactors: 4, Watchers: 4, Commenters: 2, Keys: keys(4), Pace: 100 * time.Millisecond})
	// Each kind of write accepted once before the freeze: the stack is warm.
	waitAccepted(t, l, time.Time{})

	from, to := outage(t, emulators.Bigtable, 30*time.Second, nil)
	// Each kind accepted again after the thaw, then the load stops.
	waitAccepted(t, l, to)
	finish(t, l)
	samples := l.Rec.Samples()
	checkAnswers(t, samples, st.cfg.HTTP.RequestTimeout)

	var during []workload.Sample
	var accepted []string
	for _, w := range regionLostWrites {
		ss := workload.Between(samples, w.op, from, to)
		during = append(during, ss...)
		n := workload.CountCode(ss, w.code)
		accepted = append(accepted, fmt.Sprintf("%s %d", w.op, n))
		expect(t, w.op+" accepted while Bigtable was frozen", n > 0)
		if n503 := workload.CountCode(ss, 503); n503 > 0 {
			t.Errorf("%s answered 503 %d times while Bigtable was frozen", w.op, n503)
		}
	}
	t.Logf("figures: writes sent during the %v freeze and accepted: %s", to.Sub(from).Round(time.Second), strings.Join(accepted, ", "))
	t.Logf("figures: answers to writes sent during the freeze, by status: %s", workload.Summary(during))
	t.Logf("figures: %d %q lines logged", logLines(t, ratelimit.LogDegraded)-degradedBefore, ratelimit.LogDegraded)

	st.settle(t, l.Model)
	drift, err := countDrift(st, l.Model)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figures: drift after the freeze: %d (summed over %d counters and their fields); %d watches accepted, all in history", drift, len(l.Model.Keys()), l.Model.Watches())
	if drift != 0 {
		t.Errorf("drift %d after the freeze, want 0", drift)
	}
}

// waitAccepted waits until every kind of write of the drill has been
// accepted at least once after since.
func waitAccepted(t *testing.T, l *workload.Load, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		missing := []string{}
		samples := l.Rec.Samples()
		for _, w := range regionLostWrites {
			if workload.CountCode(workload.Between(samples, w.op, since, time.Now().Add(time.Hour)), w.code) == 0 {
				missing = append(missing, w.op)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not accepted within 60 s since %s: %v", since.Format("15:04:05.000"), missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countDrift sums, over every counter of the model and each of its fields,
// how far the counted value (snapshot plus shards and pending) is from the
// model's.
func countDrift(st *drillStack, m *workload.Model) (int64, error) {
	keys := m.Keys()
	counted, pending, err := st.counts.Totals(context.Background(), keys)
	if err != nil {
		return 0, err
	}
	want := m.Counts()
	var drift int64
	for _, k := range keys {
		got, w, p := counted[k], want[k], pending[k]
		for _, d := range []int64{
			got.Likes - w.Likes, got.Dislikes - w.Dislikes, got.Comments - w.Comments, got.Replies - w.Replies,
			got.Views - w.Views, got.UniqueViewers - w.UniqueViewers,
			p.Likes, p.Dislikes, p.Comments, p.Replies, p.Views,
		} {
			drift += max(d, -d)
		}
	}
	return drift, nil
}

// logLines counts the functions' log lines (the drills' functions.log)
// whose message is msg.
func logLines(t *testing.T, msg string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logRoot, "functions.log"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte(fmt.Sprintf("%q:%q", "message", msg)))
}
