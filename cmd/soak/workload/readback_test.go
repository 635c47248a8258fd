package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter"
)

// api serves handler as the API for one test; its answers are JSON, as the
// API's are (the generated client decodes only those).
func api(t *testing.T, handler http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return NewClient(srv.URL)
}

// CheckCounts reports exactly the keys whose counts or unique viewers
// differ from the model's.
func TestCheckCounts(t *testing.T) {
	m := NewModel(6 * time.Hour)
	m.SetReaction("ann", "a", "like")
	m.SetReaction("ann", "b", "like")
	m.AddWatch(WatchKey{User: "ann", Video: "v", At: time.Now().Add(-time.Minute).UnixMilli()}, 0)
	served := map[string]counter.Values{
		"a": {Likes: 1},
		"b": {Likes: 2},                   // one too many
		"v": {Views: 1, UniqueViewers: 2}, // an estimate off by one
	}
	c := api(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/counts" {
			http.NotFound(w, r)
			return
		}
		out := map[string]counter.Values{}
		for _, id := range strings.Split(r.URL.Query().Get("ids"), ",") {
			out[id] = served[id]
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"counts": out})
	})
	diffs, err := CheckCounts(c, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 2 || !strings.HasPrefix(diffs[0], "b:") || !strings.HasPrefix(diffs[1], "v:") || !strings.Contains(diffs[1], "unique viewers") {
		t.Errorf("diffs %q, want b's likes and v's unique viewers", diffs)
	}
	served["b"] = counter.Values{Likes: 1}
	served["v"] = counter.Values{Views: 1, UniqueViewers: 1}
	if diffs, err := CheckCounts(c, m); err != nil || len(diffs) != 0 {
		t.Errorf("counts as the model: %q %v", diffs, err)
	}
}

// CheckHistories reads every page of each user's history and reports the
// users whose history differs from the model's.
func TestCheckHistories(t *testing.T) {
	m := NewModel(6 * time.Hour)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	m.AddUser("ann", "tok-ann")
	m.AddUser("bob", "tok-bob")
	for i := range 250 {
		m.AddWatch(WatchKey{User: "ann", Video: fmt.Sprintf("v%03d", i), At: base.Add(time.Duration(i) * time.Second).UnixMilli()}, 1)
	}
	m.AddWatch(WatchKey{User: "bob", Video: "x", At: base.UnixMilli()}, 1)
	want := m.History()
	bobGot := []HistoryEntry{{Video: "x", At: base.UnixMilli(), Position: 2}}
	c := api(t, func(w http.ResponseWriter, r *http.Request) {
		es := want["ann"]
		if r.Header.Get("Authorization") == "Bearer tok-bob" {
			es = bobGot
		}
		from, _ := strconv.Atoi(r.URL.Query().Get("pageToken"))
		to := min(from+100, len(es))
		var page struct {
			Entries       []map[string]any `json:"entries"`
			NextPageToken string           `json:"nextPageToken,omitempty"`
		}
		for _, e := range es[from:to] {
			page.Entries = append(page.Entries, map[string]any{
				"videoId": e.Video, "positionSeconds": e.Position,
				"watchedAt": time.UnixMilli(e.At).UTC().Format(time.RFC3339Nano),
			})
		}
		if to < len(es) {
			page.NextPageToken = strconv.Itoa(to)
		}
		_ = json.NewEncoder(w).Encode(page)
	})
	diffs := CheckHistories(c, m)
	if len(diffs) != 1 || len(diffs["bob"].Wrong) != 1 {
		t.Errorf("diffs %+v, want bob's one wrong position", diffs)
	}
	got, err := c.History("tok-ann")
	if err != nil || len(got) != 250 {
		t.Errorf("ann's history over three pages: %d entries, %v", len(got), err)
	}
}

// until repeats a write through 503s, 429s, 5xx and missing answers until
// it is accepted; a 404 ends it when notFound is set; any other answer, or
// no acceptance within the write deadline, fails the write.
func TestUntil(t *testing.T) {
	var calls atomic.Int64
	answers := []int{}
	c := api(t, func(w http.ResponseWriter, r *http.Request) {
		i := int(calls.Add(1)) - 1
		code := answers[min(i, len(answers)-1)]
		if code == 503 || code == 429 {
			w.Header().Set("Retry-After", "0")
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"n":%d}`, i)
	})
	l := &Load{c: c, Rec: &Recorder{}, spec: Spec{WriteDeadline: 5 * time.Second}}
	errNotFound := errors.New("not found")
	for _, tt := range []struct {
		name     string
		answers  []int
		deadline time.Duration
		calls    int64
		err      error // nil: accepted; errNotFound: ended by notFound
		fails    bool
	}{
		{name: "accepted at once", answers: []int{200}, calls: 1},
		{name: "through failures", answers: []int{503, 429, 500, 502, 200}, calls: 5},
		{name: "404", answers: []int{404}, calls: 1, err: errNotFound},
		{name: "refused", answers: []int{400}, calls: 1, fails: true},
		{name: "conflict", answers: []int{503, 409}, calls: 2, fails: true},
		{name: "never accepted", answers: []int{503}, deadline: 300 * time.Millisecond, fails: true},
	} {
		calls.Store(0)
		answers = tt.answers
		l.spec.WriteDeadline = 5 * time.Second
		if tt.deadline != 0 {
			l.spec.WriteDeadline = tt.deadline
		}
		var body string
		err := l.until("op", "PUT", "/x", "tok", "{}", 200, func([]byte) error { return errNotFound }, func(b []byte) error {
			body = string(b)
			return nil
		})
		switch {
		case tt.fails && (err == nil || errors.Is(err, errNotFound)):
			t.Errorf("%s: %v, want a failure", tt.name, err)
		case !tt.fails && !errors.Is(err, tt.err):
			t.Errorf("%s: %v, want %v", tt.name, err, tt.err)
		case tt.calls != 0 && calls.Load() != tt.calls:
			t.Errorf("%s: %d calls, want %d", tt.name, calls.Load(), tt.calls)
		case !tt.fails && tt.err == nil && body != fmt.Sprintf(`{"n":%d}`, tt.calls-1):
			t.Errorf("%s: accepted body %q", tt.name, body)
		}
	}
	if n := len(l.Rec.Samples()); n == 0 {
		t.Error("the attempts were not recorded")
	}
}

// pick returns distinct ids of the pool, at most n; any is "" for an empty
// pool.
func TestSpamPool(t *testing.T) {
	var p spamPool
	rnd := rand.New(rand.NewPCG(1, 2))
	if got := p.any(rnd); got != "" {
		t.Errorf("any of an empty pool: %q", got)
	}
	for i := range 5 {
		p.add(fmt.Sprint(i))
	}
	for _, n := range []int{0, 3, 5, 9} {
		got := p.pick(rnd, n)
		seen := map[string]bool{}
		for _, id := range got {
			seen[id] = true
		}
		if len(got) != min(n, 5) || len(seen) != len(got) {
			t.Errorf("pick(%d) = %q", n, got)
		}
	}
}
