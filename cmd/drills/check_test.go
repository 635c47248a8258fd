package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/topology"
)

// convergeWithin bounds how long the pipeline may take to converge after the
// load stops (Pub/Sub redelivers at seconds' intervals; the relay waits
// COUNTER_RELAY_AFTER).
const convergeWithin = 90 * time.Second

// settle waits until the pipeline has converged by itself — every counter
// (snapshot plus shards) equals the model with nothing pending, and every
// user's history is the model's — with no reconciliation, then checks each
// read path against the model, the counters against the reactions in
// Spanner, and that a reconciliation of every counter corrects nothing.
func (st *drillStack) settle(t *testing.T, m *model) {
	t.Helper()
	ctx := context.Background()
	want := m.counts()
	keys := slices.Sorted(maps.Keys(want))
	start := time.Now()

	var diffs []string
	for {
		diffs = diffs[:0]
		counted, pending, err := st.counters.Totals(ctx, keys)
		if err != nil {
			diffs = append(diffs, err.Error())
		}
		for _, k := range keys {
			if err != nil {
				break
			}
			w, c := want[k], counted[k]
			if c != (counter.Values{Likes: w[0], Dislikes: w[1], Views: w[2]}) {
				diffs = append(diffs, fmt.Sprintf("%s: counted %+v, want likes %d dislikes %d views %d", k, c, w[0], w[1], w[2]))
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
				c.cmd.Process.Signal(syscall.SIGQUIT)
			}
			t.Errorf("the counters did not converge within %v:\n%s", convergeWithin, strings.Join(diffs, "\n"))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(diffs) == 0 {
		t.Logf("settle: %d counters exact, nothing pending, after %v", len(keys), time.Since(start).Round(100*time.Millisecond))
	}

	wantH := m.history()
	hstart := time.Now()
	for {
		diffs = diffs[:0]
		for _, u := range slices.Sorted(maps.Keys(m.users)) {
			got, err := st.listHistory(m.users[u])
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("%s: %v", u, err))
				continue
			}
			if d := diffHistory(got, wantH[u]); d != "" {
				diffs = append(diffs, fmt.Sprintf("%s: %s", u, d))
			}
		}
		if len(diffs) == 0 {
			break
		}
		if time.Since(start) > convergeWithin {
			t.Errorf("history rows lost or wrong after %v:\n%s", convergeWithin, strings.Join(diffs, "\n"))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(diffs) == 0 {
		n := 0
		for _, es := range wantH {
			n += len(es)
		}
		t.Logf("settle: %d history entries of %d watches all present (%v more)", n, len(m.watches), time.Since(hstart).Round(100*time.Millisecond))
	}

	st.checkCountsAPI(t, want, keys)
	st.checkReactionTruth(t, m, keys)
	st.checkReactionsAPI(t, m, keys)
	st.checkReconcile(t)
	st.checkNothingDeadLettered(t)
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

// listHistory reads all of a user's history through the API.
func (st *drillStack) listHistory(tok string) ([]historyEntry, error) {
	var out []historyEntry
	token := ""
	for range 100 {
		path := "/v1/history?pageSize=100"
		if token != "" {
			path += "&pageToken=" + url.QueryEscape(token)
		}
		code, _, b := st.call(nil, "", "GET", path, tok, "")
		if code != 200 {
			return nil, fmt.Errorf("GET %s: %d %s", path, code, b)
		}
		var page struct {
			Entries []struct {
				VideoID         string  `json:"videoId"`
				WatchedAt       string  `json:"watchedAt"`
				PositionSeconds float64 `json:"positionSeconds"`
			} `json:"entries"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("GET %s: %v: %s", path, err, b)
		}
		for _, e := range page.Entries {
			at, err := time.Parse(time.RFC3339Nano, e.WatchedAt)
			if err != nil {
				return nil, fmt.Errorf("watchedAt %q: %v", e.WatchedAt, err)
			}
			out = append(out, historyEntry{Video: e.VideoID, At: at.UnixMilli(), Position: e.PositionSeconds})
		}
		if token = page.NextPageToken; token == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("history of more than 100 pages")
}

func diffHistory(got, want []historyEntry) string {
	if slices.Equal(got, want) {
		return ""
	}
	g := map[string]historyEntry{}
	for _, e := range got {
		g[e.Video] = e
	}
	var d []string
	for _, e := range want {
		ge, ok := g[e.Video]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("missing %s at %s", e.Video, time.UnixMilli(e.At).UTC().Format(time.RFC3339Nano)))
		case ge != e:
			d = append(d, fmt.Sprintf("%s at %s (%v s), want %s (%v s)", e.Video,
				time.UnixMilli(ge.At).UTC().Format(time.RFC3339Nano), ge.Position, time.UnixMilli(e.At).UTC().Format(time.RFC3339Nano), e.Position))
		}
		delete(g, e.Video)
	}
	for v := range g {
		d = append(d, "unexpected "+v)
	}
	if len(d) == 0 {
		d = append(d, fmt.Sprintf("order: got %v, want %v", got, want))
	}
	return strings.Join(d, "; ")
}

// checkCountsAPI reads the counts anonymously, as any viewer does.
func (st *drillStack) checkCountsAPI(t *testing.T, want map[string][3]int64, keys []string) {
	t.Helper()
	for _, chunk := range slices.Collect(slices.Chunk(keys, 50)) {
		var diffs []string
		// Anonymous reads may be up to COUNTS_MAX_STALENESS old.
		for attempt := 0; attempt < 10; attempt++ {
			diffs = diffs[:0]
			code, _, b := st.call(nil, "", "GET", "/v1/counts?ids="+strings.Join(chunk, ","), "", "")
			var resp struct {
				Counts map[string]counter.Values `json:"counts"`
			}
			if code != 200 || json.Unmarshal(b, &resp) != nil {
				diffs = append(diffs, fmt.Sprintf("GET /v1/counts: %d %s", code, b))
			}
			for _, k := range chunk {
				w := want[k]
				if got := resp.Counts[k]; got != (counter.Values{Likes: w[0], Dislikes: w[1], Views: w[2]}) {
					diffs = append(diffs, fmt.Sprintf("%s: GET /v1/counts says %+v, want likes %d dislikes %d views %d", k, got, w[0], w[1], w[2]))
				}
			}
			if len(diffs) == 0 {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if len(diffs) > 0 {
			t.Errorf("counts API:\n%s", strings.Join(diffs, "\n"))
		}
	}
}

// checkReactionTruth recounts the reactions in Spanner (the source of
// truth) and compares them with the model: nothing accepted was lost.
func (st *drillStack) checkReactionTruth(t *testing.T, m *model, keys []string) {
	t.Helper()
	want := m.counts()
	var truth map[string]counter.Values
	err := st.db.InSnapshot(context.Background(), func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		var err error
		truth, err = reactionstore.Source{}.Truth(ctx, tx, keys)
		return err
	})
	if err != nil {
		t.Errorf("recount reactions: %v", err)
		return
	}
	for _, k := range keys {
		if got := truth[k]; got.Likes != want[k][0] || got.Dislikes != want[k][1] {
			t.Errorf("%s: Spanner holds %d likes %d dislikes, the API accepted %d and %d", k, got.Likes, got.Dislikes, want[k][0], want[k][1])
		}
	}
}

// checkReactionsAPI reads every user's reactions back.
func (st *drillStack) checkReactionsAPI(t *testing.T, m *model, keys []string) {
	t.Helper()
	m.mu.Lock()
	users := maps.Clone(m.users)
	m.mu.Unlock()
	for _, u := range slices.Sorted(maps.Keys(users)) {
		if !strings.HasPrefix(u, "reactor-") {
			continue
		}
		for _, chunk := range slices.Collect(slices.Chunk(keys, 50)) {
			code, _, b := st.call(nil, "", "GET", "/v1/reactions?ids="+strings.Join(chunk, ","), users[u], "")
			var resp struct {
				Reactions map[string]struct{ Reaction string } `json:"reactions"`
			}
			if code != 200 || json.Unmarshal(b, &resp) != nil {
				t.Errorf("%s: GET /v1/reactions: %d %s", u, code, b)
				continue
			}
			m.mu.Lock()
			for _, k := range chunk {
				w := m.reactions[k][u]
				if w == "" {
					w = "none"
				}
				if got := resp.Reactions[k].Reaction; got != w {
					t.Errorf("%s on %s: GET /v1/reactions says %q, the last accepted PUT set %q", u, k, got, w)
				}
			}
			m.mu.Unlock()
		}
	}
}

// checkReconcile runs a reconciliation of every counter: the pipeline
// converged by itself, so there is nothing to correct.
func (st *drillStack) checkReconcile(t *testing.T) {
	t.Helper()
	code, b := st.internal("Reconcile", "/internal/reconcile")
	var rep counterstore.ReconcileReport
	if code != 200 || json.Unmarshal(b, &rep) != nil {
		t.Errorf("POST /internal/reconcile: %d %s", code, b)
		return
	}
	if rep.Corrected != 0 || rep.Skipped != 0 {
		t.Errorf("reconciliation corrected %d counters (%d skipped): %+v", rep.Corrected, rep.Skipped, rep.Corrections)
	}
	t.Logf("reconcile: %d counters checked, %d corrected", rep.Checked, rep.Corrected)
}
