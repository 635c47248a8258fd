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

// call sends one API request and records its answer.
func (st *drillStack) call(rec *recorder, op, method, path, token, body string) (int, http.Header, []byte) {
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

// model is what the API accepted: it is the truth the counters and the
// history must end up showing.
type model struct {
	mu        sync.Mutex
	reactions map[string]map[string]string // item → user → like/dislike
	watches   map[watchKey]float64         // accepted watch → position
	keys      map[string]bool              // every counter key touched
	users     map[string]string            // user → token
	accepted  int
}

func newModel() *model {
	return &model{
		reactions: map[string]map[string]string{}, watches: map[watchKey]float64{},
		keys: map[string]bool{}, users: map[string]string{},
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

func (m *model) addUser(user, token string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users[user] = token
}

// counts is what every counter must read: likes and dislikes from the
// current reactions, views from the distinct accepted watches.
func (m *model) counts() map[string][3]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][3]int64{}
	for k := range m.keys {
		out[k] = [3]int64{}
	}
	for item, byUser := range m.reactions {
		v := out[item]
		for _, kind := range byUser {
			if kind == "like" {
				v[0]++
			} else {
				v[1]++
			}
		}
		out[item] = v
	}
	for w := range m.watches {
		v := out[w.video]
		v[2]++
		out[w.video] = v
	}
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
// watches (at random past times, so out of order), readers read counts and
// histories. Each user is sequential and retries a write until the API
// accepts it, as a client does, so the model knows every accepted change.
type loadSpec struct {
	reactors, watchers, readers int
	keys                        []string      // items and videos
	pace                        time.Duration // pause between one user's operations
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
	st.t.Logf("load: %d reactors, %d watchers, %d readers on %d keys (seed %d)", spec.reactors, spec.watchers, spec.readers, len(spec.keys), seed)
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
	return l.until("PUT /v1/reactions", "PUT", "/v1/reactions/"+item, tok, body, http.StatusOK, func(b []byte) error {
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
	return l.until("POST /v1/history", "POST", "/v1/history", tok, body, http.StatusAccepted, func(b []byte) error {
		if strings.TrimSpace(string(b)) != `{"recorded":true}` {
			return fmt.Errorf("POST /v1/history %s: answer %s", body, b)
		}
		l.m.addWatch(watchKey{user, video, at.UnixMilli()}, pos)
		return nil
	})
}

// until repeats a write while the API answers 503 or 429 (waiting
// Retry-After, at most 2 s) or does not answer, until it answers want.
func (l *load) until(op, method, path, tok, body string, want int, accepted func([]byte) error) error {
	deadline := time.Now().Add(writeDeadline)
	for {
		code, h, b := l.st.call(l.rec, op, method, path, tok, body)
		switch code {
		case want:
			return accepted(b)
		case http.StatusServiceUnavailable, http.StatusTooManyRequests, 0:
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
