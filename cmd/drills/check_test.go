package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/topology"
)

// convergeWithin bounds how long the pipeline may take to converge after the
// load stops (Pub/Sub redelivers at seconds' intervals; the relay waits
// COUNTER_RELAY_AFTER).
const convergeWithin = 90 * time.Second

// settle waits until the pipeline has converged by itself — every counter
// (snapshot plus shards) equals the model with nothing pending, and every
// user's history is the model's — with no reconciliation; then it checks
// each read path against the model, the counters against the sources of
// truth in Spanner, that a reconciliation of every counter corrects nothing
// and that nothing was dead-lettered.
func (st *drillStack) settle(t *testing.T, m *workload.Model) {
	t.Helper()
	ctx := context.Background()
	want := m.Counts()
	keys := m.Keys()
	start := time.Now()

	var diffs []string
	for {
		diffs = diffs[:0]
		counted, pending, err := st.counts.Totals(ctx, keys)
		if err != nil {
			diffs = append(diffs, err.Error())
		}
		for _, k := range keys {
			if err != nil {
				break
			}
			if c := counted[k]; c != want[k] {
				diffs = append(diffs, fmt.Sprintf("%s: counted %+v, want %+v", k, c, want[k]))
			}
			if p := pending[k]; !p.IsZero() {
				diffs = append(diffs, fmt.Sprintf("%s: still pending %+v", k, p))
			}
		}
		if len(diffs) == 0 {
			break
		}
		if time.Since(start) > convergeWithin {
			if c := st.child.Load(); c != nil {
				// Its goroutines go to its log, which is kept.
				c.Cmd.Process.Signal(syscall.SIGQUIT)
			}
			t.Errorf("the counters did not converge within %v:\n%s", convergeWithin, strings.Join(diffs, "\n"))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(diffs) == 0 {
		t.Logf("settle: %d counters exact, nothing pending, after %v", len(keys), time.Since(start).Round(100*time.Millisecond))
	}

	hstart := time.Now()
	var hdiffs map[string]workload.HistoryDiff
	for {
		if hdiffs = workload.CheckHistories(st.api, m); len(hdiffs) == 0 {
			break
		}
		if time.Since(start) > convergeWithin {
			var lines []string
			for _, u := range slices.Sorted(maps.Keys(hdiffs)) {
				lines = append(lines, u+": "+hdiffs[u].String())
				lines = append(lines, "  what "+u+" did:")
				for _, j := range m.Journal(u) {
					lines = append(lines, "    "+j)
				}
			}
			t.Errorf("history rows lost or wrong after %v:\n%s", convergeWithin, strings.Join(lines, "\n"))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(hdiffs) == 0 {
		n := 0
		for _, es := range m.History() {
			n += len(es)
		}
		t.Logf("settle: %d history entries of %d watches all present (%v more)", n, m.Watches(), time.Since(hstart).Round(100*time.Millisecond))
	}

	// The pipeline has converged: what follows reads a quiet system.
	st.stopScheduler()
	st.checkCountsAPI(t, m)
	st.checkTruth(t, m, keys)
	for _, d := range workload.CheckReactions(st.api, m) {
		t.Error(d)
	}
	cdiffs, listed, failed := workload.CheckComments(st.api, m)
	for _, d := range cdiffs {
		t.Error(d)
	}
	t.Logf("comments: %d visible comments and replies listed as accepted", listed)
	if failed > 0 {
		// commentstore.ListReplies reads in a multi-use snapshot outside
		// spannerdb's one-transaction turn: against the emulator, an
		// overlapping read-write transaction makes it answer 500, or 404
		// ("transaction not found").
		t.Logf("comments: %d listing reads failed before one answered", failed)
	}
	st.checkReconcile(t)
	st.checkNothingDeadLettered(t)
}

// checkCountsAPI reads the counts anonymously, as any viewer does; such
// reads may be up to COUNTS_CACHE_TTL plus COUNTS_MAX_STALENESS old.
func (st *drillStack) checkCountsAPI(t *testing.T, m *workload.Model) {
	t.Helper()
	var diffs []string
	for range 10 {
		var err error
		if diffs, err = workload.CheckCounts(st.api, m); err != nil {
			diffs = []string{err.Error()}
		}
		if len(diffs) == 0 {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Errorf("counts API:\n%s", strings.Join(diffs, "\n"))
}

// checkTruth recounts the reactions and the comments in Spanner (the
// sources of truth) and compares them with the model: nothing accepted was
// lost, nothing refused was kept.
func (st *drillStack) checkTruth(t *testing.T, m *workload.Model, keys []string) {
	t.Helper()
	want := m.Counts()
	truth, err := workload.Truth(context.Background(), st.db, keys)
	if err != nil {
		t.Errorf("recount the sources of truth: %v", err)
		return
	}
	fields := workload.TruthFields()
	for _, k := range keys {
		if got, w := truth[k], want[k].Only(fields); got != w {
			t.Errorf("%s: Spanner's reactions and comments count %+v, the API accepted %+v", k, got, w)
		}
	}
}

// checkReconcile runs a reconciliation of every counter: the pipeline
// converged by itself, so there is nothing to correct.
func (st *drillStack) checkReconcile(t *testing.T) {
	t.Helper()
	code, b := st.internal("Reconcile", "/internal/reconcile")
	var rep reconcilestore.Report
	if code != 200 || json.Unmarshal(b, &rep) != nil {
		t.Errorf("POST /internal/reconcile: %d %s", code, b)
		return
	}
	if rep.Corrected != 0 || rep.Skipped != 0 {
		t.Errorf("reconciliation corrected %d counters (%d skipped): %+v", rep.Corrected, rep.Skipped, rep.Corrections)
	}
	t.Logf("reconcile: %d counters checked, %d corrected", rep.Checked, rep.Corrected)
}

// checkNothingDeadLettered checks that no message went to a dead-letter
// topic: only poison may.
func (st *drillStack) checkNothingDeadLettered(t *testing.T) {
	t.Helper()
	top := topology.MustLoad()
	for _, topic := range top.PubSub.Topics {
		for _, m := range pullAll(t, st, top.PubSub.DeadLetterSubscription(topic.DeadLetterTopic)) {
			t.Errorf("dead-lettered from %s after %s deliveries: %.200q", m.Attributes["CloudPubSubDeadLetterSourceSubscription"],
				m.Attributes["CloudPubSubDeadLetterSourceDeliveryCount"], m.Data)
		}
	}
}
