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

	"github.com/videngage/engagement/shared/comment/commentstore"
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

	// The pipeline has converged: what follows reads a quiet system.
	st.stopScheduler()
	st.checkCountsAPI(t, want, keys)
	st.checkTruth(t, m, keys)
	st.checkReactionsAPI(t, m, keys)
	st.checkCommentsAPI(t, m, want)
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
func (st *drillStack) checkCountsAPI(t *testing.T, want map[string]counter.Values, keys []string) {
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
				if got := resp.Counts[k]; got != want[k] {
					diffs = append(diffs, fmt.Sprintf("%s: GET /v1/counts says %+v, want %+v", k, got, want[k]))
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

// checkTruth recounts the reactions and the comments in Spanner (the
// sources of truth) and compares them with the model: nothing accepted was
// lost, nothing refused was kept.
func (st *drillStack) checkTruth(t *testing.T, m *model, keys []string) {
	t.Helper()
	want := m.counts()
	truth := map[string]counter.Values{}
	err := st.db.InSnapshot(context.Background(), func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		for _, src := range []counterstore.Source{reactionstore.Source{}, commentstore.Source{}} {
			got, err := src.Truth(ctx, tx, keys)
			if err != nil {
				return err
			}
			for k, v := range got {
				truth[k] = truth[k].Plus(v.Only(src.Fields()))
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("recount the sources of truth: %v", err)
		return
	}
	fields := []counter.Field{counter.Likes, counter.Dislikes, counter.Comments, counter.Replies}
	for _, k := range keys {
		if got, w := truth[k], want[k].Only(fields); got != w {
			t.Errorf("%s: Spanner's reactions and comments count %+v, the API accepted %+v", k, got, w)
		}
	}
}

// checkCommentsAPI reads every listing back: each visible comment, with its
// reply count, and nothing else.
func (st *drillStack) checkCommentsAPI(t *testing.T, m *model, want map[string]counter.Values) {
	t.Helper()
	m.mu.Lock()
	videos := map[string]bool{}
	var parents []string
	for _, c := range m.comments {
		videos[c.video] = true
		if c.parent == "" && m.visible(c) {
			parents = append(parents, c.id)
		}
	}
	m.mu.Unlock()
	n := 0
	for _, v := range slices.Sorted(maps.Keys(videos)) {
		got, err := st.listComments("/v1/videos/" + v + "/comments")
		if err != nil {
			t.Error(err)
			continue
		}
		n += len(got)
		if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, m.listing(v, "")) {
			t.Errorf("comments of %s: listed %v, want %v", v, ids, m.listing(v, ""))
		}
		for id, replies := range got {
			if replies != want[id].Replies {
				t.Errorf("comment %s lists replyCount %d, want %d", id, replies, want[id].Replies)
			}
		}
	}
	flaky := 0
	for _, p := range parents {
		// Against the emulator, commentstore.ListReplies reads in a
		// multi-use snapshot outside spannerdb's one-transaction turn: when
		// a read-write transaction overlaps it, it answers 500, or 404 when
		// the emulator says "transaction not found". Count those, read again.
		var got map[string]int64
		var err error
		for range 20 {
			if got, err = st.listComments("/v1/comments/" + p + "/replies"); err == nil {
				break
			}
			flaky++
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Error(err)
			continue
		}
		n += len(got)
		if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, m.listing("", p)) {
			t.Errorf("replies of %s: listed %v, want %v", p, ids, m.listing("", p))
		}
	}
	if len(videos) > 0 {
		t.Logf("comments: %d visible comments and replies listed as accepted", n)
	}
	if flaky > 0 {
		t.Logf("comments: GET /v1/comments/{id}/replies failed %d times before answering (commentstore.ListReplies reads outside the emulator's one-transaction turn)", flaky)
	}
}

// listComments reads all pages of a listing: comment id → replyCount.
func (st *drillStack) listComments(path string) (map[string]int64, error) {
	out := map[string]int64{}
	token := ""
	for range 100 {
		p := path + "?pageSize=100"
		if token != "" {
			p += "&pageToken=" + url.QueryEscape(token)
		}
		code, _, b := st.call(nil, "", "GET", p, "", "")
		var page struct {
			Comments []struct {
				ID         string `json:"id"`
				ReplyCount int64  `json:"replyCount"`
			} `json:"comments"`
			NextPageToken string `json:"nextPageToken"`
		}
		if code != 200 || json.Unmarshal(b, &page) != nil {
			return nil, fmt.Errorf("GET %s: %d %s", p, code, b)
		}
		for _, c := range page.Comments {
			out[c.ID] = c.ReplyCount
		}
		if token = page.NextPageToken; token == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("GET %s: more than 100 pages", path)
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
