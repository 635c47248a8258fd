package workload

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter"
)

// reactionsAPI serves GET /v1/reactions and GET /v1/me/counts from its
// maps: user → item → reaction, and the counts of each item.
type reactionsAPI struct {
	mu        sync.Mutex
	tokens    map[string]string // token → user
	reactions map[string]map[string]string
	counts    map[string]counter.Values
}

func (a *reactionsAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	user, ok := a.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return
	}
	ids := strings.Split(r.URL.Query().Get("ids"), ",")
	type reaction struct {
		Reaction string `json:"reaction"`
	}
	mine := map[string]reaction{}
	for _, id := range ids {
		kind := a.reactions[user][id]
		if kind == "" {
			kind = "none"
		}
		mine[id] = reaction{kind}
	}
	switch r.URL.Path {
	case "/v1/reactions":
		_ = json.NewEncoder(w).Encode(map[string]any{"reactions": mine})
	case "/v1/me/counts":
		counts := map[string]counter.Values{}
		for _, id := range ids {
			counts[id] = a.counts[id]
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"counts": counts, "viewer": map[string]any{"reactions": mine}})
	default:
		http.NotFound(w, r)
	}
}

// CheckReactions passes when every reactor's reactions and counts read back
// as the model has them, and reports each way they can differ: a reaction
// lost in GET /v1/reactions, a viewer's reaction in GET /v1/me/counts, and
// a count. Users who are not reactors are not read.
func TestCheckReactions(t *testing.T) {
	m := NewModel(6 * time.Hour)
	m.AddUser("reactor-1", "t1")
	m.AddUser("reactor-2", "t2")
	m.AddUser("watcher-1", "t3")
	m.SetReaction("reactor-1", "a", "like")
	m.SetReaction("reactor-2", "a", "dislike")
	m.SetReaction("reactor-2", "b", "like")
	m.SetReaction("reactor-2", "b", "none") // withdrawn
	a := &reactionsAPI{
		tokens: map[string]string{"t1": "reactor-1", "t2": "reactor-2", "t3": "watcher-1"},
		reactions: map[string]map[string]string{
			"reactor-1": {"a": "like"},
			"reactor-2": {"a": "dislike"},
		},
		counts: map[string]counter.Values{"a": {Likes: 1, Dislikes: 1}},
	}
	var reads sync.Map // user → requests
	c := api(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := reads.LoadOrStore(r.Header.Get("Authorization"), new(int))
		*n.(*int)++
		a.serve(w, r)
	})
	if diffs := CheckReactions(c, m); len(diffs) != 0 {
		t.Fatalf("the API as the model: %q", diffs)
	}
	if _, read := reads.Load("Bearer t3"); read {
		t.Error("a user who is not a reactor was read")
	}

	for _, tt := range []struct {
		name   string
		mutate func()
		want   []string // a substring of each diff, in order
	}{
		{"a reaction lost", func() { delete(a.reactions["reactor-1"], "a") },
			[]string{`reactor-1 on a: GET /v1/reactions says "none", the last accepted PUT set "like"`, `reactor-1 on a: GET /v1/me/counts says "none"`}},
		{"a withdrawn reaction back", func() { a.reactions["reactor-2"]["b"] = "like" },
			[]string{`reactor-2 on b: GET /v1/reactions says "like", the last accepted PUT set "none"`, `reactor-2 on b: GET /v1/me/counts says "like"`}},
		{"a count off by one", func() { a.counts["a"] = counter.Values{Likes: 2, Dislikes: 1} },
			[]string{"reactor-1 on a: GET /v1/me/counts says", "reactor-2 on a: GET /v1/me/counts says"}},
	} {
		saved := map[string]map[string]string{"reactor-1": {"a": "like"}, "reactor-2": {"a": "dislike"}}
		a.mu.Lock()
		tt.mutate()
		a.mu.Unlock()
		diffs := CheckReactions(c, m)
		if len(diffs) != len(tt.want) {
			t.Errorf("%s: diffs %q, want %d", tt.name, diffs, len(tt.want))
		} else {
			for i, w := range tt.want {
				if !strings.Contains(diffs[i], w) {
					t.Errorf("%s: diff %q, want it to say %q", tt.name, diffs[i], w)
				}
			}
		}
		a.mu.Lock()
		a.reactions, a.counts = saved, map[string]counter.Values{"a": {Likes: 1, Dislikes: 1}}
		a.mu.Unlock()
	}

	a.mu.Lock()
	a.tokens = map[string]string{}
	a.mu.Unlock()
	// A refused read is reported, once per reactor and chunk of items.
	if diffs := CheckReactions(c, m); len(diffs) != 2 || !strings.HasPrefix(diffs[0], "reactor-1: GET /v1/reactions: 401") || !strings.HasPrefix(diffs[1], "reactor-2: GET /v1/reactions: 401") {
		t.Errorf("every read refused: diffs %q, want a 401 per reactor", diffs)
	}
}

// commentsAPI serves the comment listings from its maps, two comments a
// page: listing path → comment id → reply count.
type commentsAPI struct {
	mu       sync.Mutex
	listings map[string]map[string]int64
	// fail answers 503 to this many reads before any answers.
	fail int
	// pages counts the pages answered.
	pages int
}

func (a *commentsAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail > 0 {
		a.fail--
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	a.pages++
	l, ok := a.listings[r.URL.Path]
	if !ok {
		l = map[string]int64{}
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range l {
			if !yield(id) {
				return
			}
		}
	})
	from, _ := strconv.Atoi(r.URL.Query().Get("pageToken"))
	to := min(from+2, len(ids))
	type comment struct {
		ID         string `json:"id"`
		ReplyCount int64  `json:"replyCount"`
	}
	page := struct {
		Comments      []comment `json:"comments"`
		NextPageToken string    `json:"nextPageToken,omitempty"`
	}{Comments: []comment{}}
	for _, id := range ids[from:to] {
		page.Comments = append(page.Comments, comment{id, l[id]})
	}
	if to < len(ids) {
		page.NextPageToken = strconv.Itoa(to)
	}
	_ = json.NewEncoder(w).Encode(page)
}

// CheckComments passes when every listing holds what the model has,
// counting the comments listed over every page, and reports a comment
// missing, one listed that the model removed, and a wrong reply count;
// reads that fail are retried and counted.
func TestCheckComments(t *testing.T) {
	m := NewModel(6 * time.Hour)
	for _, c := range []Comment{
		{ID: "c1", Video: "v", Author: "ann"},
		{ID: "c2", Video: "v", Author: "bob"},
		{ID: "c3", Video: "v", Author: "cat"},
		{ID: "r1", Video: "v", Parent: "c1", Author: "bob"},
		{ID: "r2", Video: "v", Parent: "c1", Author: "cat"},
		{ID: "r3", Video: "v", Parent: "c1", Author: "ann"},
		{ID: "c4", Video: "w", Author: "ann"},
		{ID: "c5", Video: "w", Author: "bob"},
	} {
		m.AddComment(c)
	}
	m.RemoveComments("r3", "c5")
	good := func() map[string]map[string]int64 {
		return map[string]map[string]int64{
			"/v1/videos/v/comments":   {"c1": 2, "c2": 0, "c3": 0},
			"/v1/videos/w/comments":   {"c4": 0},
			"/v1/comments/c1/replies": {"r1": 0, "r2": 0},
		}
	}
	a := &commentsAPI{listings: good()}
	c := api(t, a.serve)
	diffs, listed, failed := CheckComments(c, m)
	if len(diffs) != 0 || listed != 6 || failed != 0 {
		t.Fatalf("the API as the model: diffs %q, listed %d (want 6), failed reads %d", diffs, listed, failed)
	}
	// v's three comments take two pages; the replies of every visible
	// top-level comment are read, empty or not.
	if a.pages != 7 {
		t.Errorf("%d pages read, want 7", a.pages)
	}

	for _, tt := range []struct {
		name   string
		mutate func(l map[string]map[string]int64)
		want   string
	}{
		{"a comment missing", func(l map[string]map[string]int64) { delete(l["/v1/videos/v/comments"], "c3") },
			"/v1/videos/v/comments: listed [c1 c2], want [c1 c2 c3]"},
		{"a removed reply listed", func(l map[string]map[string]int64) { l["/v1/comments/c1/replies"]["r3"] = 0 },
			"/v1/comments/c1/replies: listed [r1 r2 r3], want [r1 r2]"},
		{"a removed comment listed", func(l map[string]map[string]int64) { l["/v1/videos/w/comments"]["c5"] = 0 },
			"/v1/videos/w/comments: listed [c4 c5], want [c4]"},
		{"a reply count off", func(l map[string]map[string]int64) { l["/v1/videos/v/comments"]["c1"] = 3 },
			"comment c1 lists replyCount 3, want 2"},
	} {
		a.mu.Lock()
		a.listings = good()
		tt.mutate(a.listings)
		a.mu.Unlock()
		diffs, _, _ := CheckComments(c, m)
		if len(diffs) != 1 || diffs[0] != tt.want {
			t.Errorf("%s: diffs %q, want [%q]", tt.name, diffs, tt.want)
		}
	}

	a.mu.Lock()
	a.listings, a.fail = good(), 3
	a.mu.Unlock()
	diffs, listed, failed = CheckComments(c, m)
	if len(diffs) != 0 || listed != 6 || failed != 3 {
		t.Errorf("after 3 refused reads: diffs %q, listed %d, failed reads %d (want 3)", diffs, listed, failed)
	}
}
