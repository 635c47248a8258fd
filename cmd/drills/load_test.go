package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/counter"
)

// sample is one answer the load got.
type sample struct {
	at         time.Time // when the request was sent
	op         string    // e.g. "PUT /v1/reactions"
	code       int       // 0: no answer (transport error)
	latency    time.Duration
	retryAfter string
	err        string
}

// recorder keeps every answer of a load.
type recorder struct {
	mu      sync.Mutex
	samples []sample
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
}

func (r *recorder) all() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples)
}

// call sends one API request (with headers given as name, value pairs) and
// records its answer.
func (st *drillStack) call(rec *recorder, op, method, path, token, body string, hdr ...string) (int, http.Header, []byte) {
	req, err := http.NewRequest(method, st.base+path, strings.NewReader(body))
	if err != nil {
		st.t.Error(err)
		return 0, nil, nil
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := st.http.Do(req)
	s := sample{at: start, op: op}
	if err != nil {
		s.latency, s.err = time.Since(start), err.Error()
		if rec != nil {
			rec.add(s)
		}
		return 0, nil, nil
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s.latency, s.code, s.retryAfter = time.Since(start), resp.StatusCode, resp.Header.Get("Retry-After")
	if rec != nil {
		rec.add(s)
	}
	return resp.StatusCode, resp.Header, b
}

// ---- the client's model of what was accepted

type watchKey struct {
	user, video string
	at          int64 // Unix milliseconds
}

// model is what the API accepted: it is the truth the counters, the
// listings and the history must end up showing.
type model struct {
	mu        sync.Mutex
	reactions map[string]map[string]string // item → user → like/dislike
	watches   map[watchKey]float64         // accepted watch → position
	comments  map[string]*commentState     // comment id → its state
	keys      map[string]bool              // every counter key touched
	users     map[string]string            // user → token
	accepted  int
}

// commentState is an accepted comment and whether it was removed (deleted
// or marked as spam).
type commentState struct {
	id, video, parent, author string
	removed                   bool
}

func newModel() *model {
	return &model{
		reactions: map[string]map[string]string{}, watches: map[watchKey]float64{},
		comments: map[string]*commentState{}, keys: map[string]bool{}, users: map[string]string{},
	}
}

func (m *model) setReaction(user, item, kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.keys[item] = true
	if m.reactions[item] == nil {
		m.reactions[item] = map[string]string{}
	}
	if kind == "none" {
		delete(m.reactions[item], user)
	} else {
		m.reactions[item][user] = kind
	}
}

func (m *model) addWatch(k watchKey, pos float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.keys[k.video] = true
	m.watches[k] = pos
}

func (m *model) addComment(c commentState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.keys[c.video] = true
	if c.parent == "" {
		m.keys[c.id] = true
	}
	if _, ok := m.comments[c.id]; !ok {
		m.comments[c.id] = &c
	}
}

func (m *model) removeComments(ids ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	for _, id := range ids {
		if c, ok := m.comments[id]; ok {
			c.removed = true
		}
	}
}

func (m *model) addUser(user, token string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users[user] = token
}

// visible reports whether a comment counts: it and its parent are not removed.
func (m *model) visible(c *commentState) bool {
	return !c.removed && (c.parent == "" || !m.comments[c.parent].removed)
}

// counts is what every counter must read: likes and dislikes from the
// current reactions, views from the distinct accepted watches, comments and
// replies from the visible comments.
func (m *model) counts() map[string]counter.Values {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]counter.Values{}
	for k := range m.keys {
		out[k] = counter.Values{}
	}
	for item, byUser := range m.reactions {
		v := out[item]
		for _, kind := range byUser {
			if kind == "like" {
				v.Likes++
			} else {
				v.Dislikes++
			}
		}
		out[item] = v
	}
	for w := range m.watches {
		v := out[w.video]
		v.Views++
		out[w.video] = v
	}
	for _, c := range m.comments {
		if !m.visible(c) {
			continue
		}
		v := out[c.video]
		v.Comments++
		out[c.video] = v
		if c.parent != "" {
			p := out[c.parent]
			p.Replies++
			out[c.parent] = p
		}
	}
	return out
}

// listing is what a comment listing must show: the visible top-level
// comments of a video (parent "") or the visible replies of a comment.
func (m *model) listing(video, parent string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.comments {
		if c.parent == parent && (parent != "" || c.video == video) && m.visible(c) {
			out = append(out, c.id)
		}
	}
	slices.Sort(out)
	return out
}

// historyEntry is one expected entry of a user's history.
type historyEntry struct {
	Video    string
	At       int64 // Unix milliseconds
	Position float64
}

// history is each user's expected history, newest first: each video once,
// at its latest accepted watch.
func (m *model) history() map[string][]historyEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	latest := map[string]map[string]historyEntry{}
	for w, pos := range m.watches {
		if latest[w.user] == nil {
			latest[w.user] = map[string]historyEntry{}
		}
		if e, ok := latest[w.user][w.video]; !ok || w.at > e.At {
			latest[w.user][w.video] = historyEntry{Video: w.video, At: w.at, Position: pos}
		}
	}
	out := map[string][]historyEntry{}
	for u, byVideo := range latest {
		var es []historyEntry
		for _, e := range byVideo {
			es = append(es, e)
		}
		sort.Slice(es, func(i, j int) bool {
			if es[i].At != es[j].At {
				return es[i].At > es[j].At
			}
			return es[i].Video < es[j].Video
		})
		out[u] = es
	}
	return out
}

// ---- the load

// loadSpec is a mixed load: reactors toggle reactions, watchers record
// watches (at random past times, so out of order), commenters post comments
// and replies and delete some of them, a spammer posts comments that a
// moderator sweeps as spam (deleted ones and ones with replies among them),
// readers read counts and histories. Each user is sequential and retries a
// write until the API accepts it, as a client does (a post with the same
// Idempotency-Key), so the model knows every accepted change.
type loadSpec struct {
	reactors, watchers, commenters, readers int
	keys                                    []string      // items and videos
	pace                                    time.Duration // pause between one user's operations
}

type load struct {
	st   *drillStack
	spec loadSpec
	m    *model
	rec  *recorder
	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	errs []error
}

// writeDeadline bounds the retries of one write: longer than any fault.
const writeDeadline = 90 * time.Second

func startLoad(st *drillStack, spec loadSpec) *load {
	l := &load{st: st, spec: spec, m: newModel(), rec: &recorder{}, stop: make(chan struct{})}
	if spec.pace == 0 {
		l.spec.pace = 50 * time.Millisecond
	}
	seed := uint64(time.Now().UnixNano())
	st.t.Logf("load: %d reactors, %d watchers, %d commenters, %d readers on %d keys (seed %d)",
		spec.reactors, spec.watchers, spec.commenters, spec.readers, len(spec.keys), seed)
	for i := range spec.reactors {
		u := fmt.Sprintf("reactor-%d", i)
		tok := st.token(u)
		l.m.addUser(u, tok)
		rnd := rand.New(rand.NewPCG(seed, uint64(i)))
		l.wg.Go(func() { l.react(u, tok, rnd) })
	}
	for i := range spec.watchers {
		u := fmt.Sprintf("watcher-%d", i)
		tok := st.token(u)
		l.m.addUser(u, tok)
		rnd := rand.New(rand.NewPCG(seed, uint64(1000+i)))
		l.wg.Go(func() { l.watch(u, tok, rnd) })
	}
	if spec.commenters > 0 {
		sp := newSpam()
		for i := range spec.commenters {
			u := fmt.Sprintf("commenter-%d", i)
			tok := st.token(u)
			l.m.addUser(u, tok)
			rnd := rand.New(rand.NewPCG(seed, uint64(2000+i)))
			l.wg.Go(func() { l.comment(u, tok, rnd, sp) })
		}
		tok := st.token("spammer")
		l.m.addUser("spammer", tok)
		l.wg.Go(func() { l.spam(tok, rand.New(rand.NewPCG(seed, 3000)), sp) })
		mod, err := st.issuer.Mint("moderator", auth.Moderator())
		if err != nil {
			st.t.Fatal(err)
		}
		l.wg.Go(func() { l.sweep(mod, rand.New(rand.NewPCG(seed, 3001)), sp) })
	}
	for i := range spec.readers {
		tok := st.token(fmt.Sprintf("watcher-%d", i%max(spec.watchers, 1)))
		l.wg.Go(func() { l.read(tok) })
	}
	return l
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *load) pause() {
	select {
	case <-l.stop:
	case <-time.After(l.spec.pace):
	}
}

func (l *load) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// finish stops the load, waits for the writes in progress to be accepted
// and reports the writes that never were.
func (l *load) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	for _, err := range l.errs {
		t.Error(err)
	}
	t.Logf("load: %d writes accepted", l.m.accepted)
}

func (l *load) react(user, tok string, rnd *rand.Rand) {
	kinds := []string{"like", "dislike", "none"}
	for !l.stopped() {
		item := l.spec.keys[rnd.IntN(len(l.spec.keys))]
		kind := kinds[rnd.IntN(len(kinds))]
		if err := l.setReaction(user, tok, item, kind); err != nil {
			l.fail(err)
			return
		}
		l.pause()
	}
}

// setReaction sends PUT /v1/reactions/{item} until it is accepted.
func (l *load) setReaction(user, tok, item, kind string) error {
	body := `{"reaction":"` + kind + `"}`
	return l.until("PUT /v1/reactions", "PUT", "/v1/reactions/"+item, tok, body, http.StatusOK, nil, func(b []byte) error {
		var r struct{ Reaction string }
		if err := json.Unmarshal(b, &r); err != nil || r.Reaction != kind {
			return fmt.Errorf("PUT /v1/reactions/%s %s: answer %s", item, kind, b)
		}
		l.m.setReaction(user, item, kind)
		return nil
	})
}

func (l *load) watch(user, tok string, rnd *rand.Rand) {
	for !l.stopped() {
		video := l.spec.keys[rnd.IntN(len(l.spec.keys))]
		// A random time in the last day: watches arrive out of order.
		at := time.Now().Add(-time.Duration(rnd.Int64N(int64(24 * time.Hour)))).UTC().Truncate(time.Millisecond)
		if err := l.recordWatch(user, tok, video, at); err != nil {
			l.fail(err)
			return
		}
		l.pause()
	}
}

// recordWatch sends POST /v1/history until it is accepted.
func (l *load) recordWatch(user, tok, video string, at time.Time) error {
	pos := float64(at.UnixMilli()%100000) / 10 // one position per watch time
	body := fmt.Sprintf(`{"videoId":%q,"watchedAt":%q,"positionSeconds":%v}`, video, at.Format(time.RFC3339Nano), pos)
	return l.until("POST /v1/history", "POST", "/v1/history", tok, body, http.StatusAccepted, nil, func(b []byte) error {
		if strings.TrimSpace(string(b)) != `{"recorded":true}` {
			return fmt.Errorf("POST /v1/history %s: answer %s", body, b)
		}
		l.m.addWatch(watchKey{user, video, at.UnixMilli()}, pos)
		return nil
	})
}

// until repeats a write while the API answers 503 or 429 (waiting
// Retry-After, at most 2 s) or does not answer, until it answers want.
// notFound, when set, takes a 404 as the end of the write (nothing done).
func (l *load) until(op, method, path, tok, body string, want int, notFound, accepted func([]byte) error, hdr ...string) error {
	deadline := time.Now().Add(writeDeadline)
	for {
		code, h, b := l.st.call(l.rec, op, method, path, tok, body, hdr...)
		switch {
		case code == want:
			return accepted(b)
		case code == http.StatusNotFound && notFound != nil:
			return notFound(b)
		case code == http.StatusServiceUnavailable, code == http.StatusTooManyRequests, code == 0:
		default:
			return fmt.Errorf("%s %s %s: %d %s", method, path, body, code, b)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s %s: not accepted within %v (last: %d %s)", method, path, body, writeDeadline, code, b)
		}
		wait := 200 * time.Millisecond
		if h != nil {
			if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
				wait = min(time.Duration(s)*time.Second, 2*time.Second)
			}
		}
		time.Sleep(wait)
	}
}

// spamPool holds the spammer's comments for the moderator to sweep.
type spamPool struct {
	mu  sync.Mutex
	ids []string
}

func newSpam() *spamPool { return &spamPool{} }

func (p *spamPool) add(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, id)
}

// pick returns up to n of the spammer's comments, removed ones included.
func (p *spamPool) pick(rnd *rand.Rand, n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, i := range rnd.Perm(len(p.ids)) {
		if len(out) == n {
			break
		}
		out = append(out, p.ids[i])
	}
	return out
}

func (p *spamPool) any(rnd *rand.Rand) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) == 0 {
		return ""
	}
	return p.ids[rnd.IntN(len(p.ids))]
}

// comment posts comments on random videos, replies to its own and to the
// spammer's, and deletes some of its own (some twice).
func (l *load) comment(user, tok string, rnd *rand.Rand, sp *spamPool) {
	var mine, replies []string // own visible comments and replies
	for n := 0; !l.stopped(); n++ {
		var err error
		switch r := rnd.IntN(10); {
		case r < 3 || len(mine) == 0:
			var id string
			if id, err = l.postComment(user, tok, l.spec.keys[rnd.IntN(len(l.spec.keys))], "", n); err == nil {
				mine = append(mine, id)
			}
		case r < 5:
			var id string
			if id, err = l.postComment(user, tok, "", mine[rnd.IntN(len(mine))], n); err == nil {
				replies = append(replies, id)
			}
		case r < 6:
			// A reply to the spammer's comment, which the moderator may
			// remove at any time: 404 then (nothing was posted).
			if parent := sp.any(rnd); parent != "" {
				_, err = l.postComment(user, tok, "", parent, n)
			}
		case r < 8 && len(replies) > 0:
			i := rnd.IntN(len(replies))
			err = l.deleteComment(tok, replies[i])
			replies = slices.Delete(replies, i, i+1)
		default:
			i := rnd.IntN(len(mine))
			id := mine[i]
			if err = l.deleteComment(tok, id); err == nil && rnd.IntN(3) == 0 {
				err = l.deleteComment(tok, id) // again: 204, no count changes
			}
			mine = slices.Delete(mine, i, i+1)
		}
		if err != nil {
			l.fail(err)
			return
		}
		l.pause()
	}
}

// spam posts top-level comments for the moderator to sweep, and deletes
// some of them itself first.
func (l *load) spam(tok string, rnd *rand.Rand, sp *spamPool) {
	for n := 0; !l.stopped(); n++ {
		id, err := l.postComment("spammer", tok, l.spec.keys[rnd.IntN(len(l.spec.keys))], "", n)
		if err == nil {
			sp.add(id)
			if rnd.IntN(4) == 0 {
				err = l.deleteComment(tok, id)
			}
		}
		if err != nil {
			l.fail(err)
			return
		}
		l.pause()
	}
}

// sweep marks batches of the spammer's comments as spam, those already
// removed included, about every second.
func (l *load) sweep(tok string, rnd *rand.Rand, sp *spamPool) {
	for !l.stopped() {
		select {
		case <-l.stop:
			return
		case <-time.After(time.Second):
		}
		ids := sp.pick(rnd, 5)
		if len(ids) == 0 {
			continue
		}
		body, _ := json.Marshal(map[string][]string{"commentIds": ids})
		err := l.until("POST /v1/moderation/spam", "POST", "/v1/moderation/spam", tok, string(body), http.StatusOK, nil, func([]byte) error {
			l.m.removeComments(ids...)
			return nil
		})
		if err != nil {
			l.fail(err)
			return
		}
	}
}

// postComment posts a comment (parent "") or a reply until it is accepted,
// every attempt with the same Idempotency-Key. A reply whose parent is gone
// answers 404 and returns "".
func (l *load) postComment(user, tok, video, parent string, n int) (string, error) {
	body := fmt.Sprintf(`{"text":"comment %d of %s"}`, n, user)
	path := "/v1/videos/" + video + "/comments"
	if parent != "" {
		// Replies are posted on the parent's video.
		l.m.mu.Lock()
		video = l.m.comments[parent].video
		l.m.mu.Unlock()
		path = "/v1/videos/" + video + "/comments"
		body = fmt.Sprintf(`{"text":"reply %d of %s","parentId":%q}`, n, user, parent)
	}
	key := fmt.Sprintf("%s-%d", user, n)
	var id string
	gone := func(b []byte) error { return nil }
	if parent == "" {
		gone = nil
	}
	err := l.until("POST /v1/videos/comments", "POST", path, tok, body, http.StatusCreated, gone, func(b []byte) error {
		var c struct {
			ID, VideoID, ParentID, AuthorID string
		}
		if err := json.Unmarshal(b, &c); err != nil || c.ID == "" || c.VideoID != video || c.ParentID != parent {
			return fmt.Errorf("POST %s %s: answer %s", path, body, b)
		}
		id = c.ID
		l.m.addComment(commentState{id: c.ID, video: video, parent: parent, author: user})
		return nil
	}, "Idempotency-Key", key)
	return id, err
}

// deleteComment deletes one of the user's comments until it is accepted.
func (l *load) deleteComment(tok, id string) error {
	return l.until("DELETE /v1/comments", "DELETE", "/v1/comments/"+id, tok, "", http.StatusNoContent, nil, func([]byte) error {
		l.m.removeComments(id)
		return nil
	})
}

func (l *load) read(tok string) {
	ids := strings.Join(l.spec.keys, ",")
	for i := 0; !l.stopped(); i++ {
		if i%2 == 0 {
			l.st.call(l.rec, "GET /v1/counts", "GET", "/v1/counts?ids="+ids, "", "")
		} else {
			l.st.call(l.rec, "GET /v1/history", "GET", "/v1/history?pageSize=20", tok, "")
		}
		l.pause()
	}
}

// ---- what the answers must look like

// checkAnswers checks every answer of the load against the spec's promises
// under failure: no 500 (or any 5xx but 503), every 503 with Retry-After, an
// answer for every request, none later than the request deadline (plus
// slack for a loaded machine).
func checkAnswers(t *testing.T, samples []sample, deadline time.Duration) {
	t.Helper()
	limit := deadline + 2500*time.Millisecond
	var bad []string
	for _, s := range samples {
		switch {
		case s.code == 0:
			bad = append(bad, fmt.Sprintf("%s at %s: no answer after %v: %s", s.op, s.at.Format("15:04:05.000"), s.latency, s.err))
		case s.code >= 500 && s.code != http.StatusServiceUnavailable:
			bad = append(bad, fmt.Sprintf("%s at %s: %d", s.op, s.at.Format("15:04:05.000"), s.code))
		case s.code == http.StatusServiceUnavailable && s.retryAfter == "":
			bad = append(bad, fmt.Sprintf("%s at %s: 503 without Retry-After", s.op, s.at.Format("15:04:05.000")))
		}
		if s.latency > limit {
			bad = append(bad, fmt.Sprintf("%s at %s: answered %d after %v, past the %v deadline", s.op, s.at.Format("15:04:05.000"), s.code, s.latency.Round(time.Millisecond), deadline))
		}
	}
	if len(bad) > 0 {
		if len(bad) > 20 {
			bad = append(bad[:20], fmt.Sprintf("… and %d more", len(bad)-20))
		}
		t.Errorf("answers that break the spec:\n%s", strings.Join(bad, "\n"))
	}
	t.Logf("answers: %s", summarize(samples))
}

// summarize counts answers by operation and status, with latencies.
func summarize(samples []sample) string {
	by := map[string]map[int]int{}
	lat := map[string][]time.Duration{}
	for _, s := range samples {
		if by[s.op] == nil {
			by[s.op] = map[int]int{}
		}
		by[s.op][s.code]++
		lat[s.op] = append(lat[s.op], s.latency)
	}
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(by)) {
		var codes []string
		for _, c := range slices.Sorted(maps.Keys(by[op])) {
			codes = append(codes, fmt.Sprintf("%d×%d", c, by[op][c]))
		}
		l := lat[op]
		slices.Sort(l)
		parts = append(parts, fmt.Sprintf("%s %s (p50 %v p99 %v max %v)", op, strings.Join(codes, " "), pct(l, 50), pct(l, 99), l[len(l)-1].Round(time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i-1, len(sorted)-1))].Round(time.Millisecond)
}

// between returns the samples of op sent in [from, to).
func between(samples []sample, op string, from, to time.Time) []sample {
	var out []sample
	for _, s := range samples {
		if s.op == op && !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

func countCode(samples []sample, code int) int {
	n := 0
	for _, s := range samples {
		if s.code == code {
			n++
		}
	}
	return n
}

// keys returns n counter keys.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("video-%d", i)
	}
	return out
}
