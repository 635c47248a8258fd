package workload

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/counter"
)

// Counts take each user's last accepted reaction on an item, once.
func TestModelCountsReactions(t *testing.T) {
	m := NewModel(6 * time.Hour)
	m.SetReaction("ann", "a", "like")
	m.SetReaction("bob", "a", "dislike")
	m.SetReaction("ann", "a", "dislike")
	m.SetReaction("bob", "a", "none")
	m.SetReaction("cat", "b", "like")
	m.SetReaction("cat", "c", "like")
	m.SetReaction("cat", "c", "none")
	want := map[string]counter.Values{"a": {Dislikes: 1}, "b": {Likes: 1}, "c": {}}
	if d := cmp.Diff(want, m.Counts()); d != "" {
		t.Errorf("counts (-want +got):\n%s", d)
	}
	for _, tt := range []struct{ user, item, want string }{
		{"ann", "a", "dislike"}, {"bob", "a", "none"}, {"cat", "b", "like"}, {"cat", "c", "none"}, {"dan", "a", "none"},
	} {
		if got := m.Reaction(tt.user, tt.item); got != tt.want {
			t.Errorf("Reaction(%s, %s) = %q, want %q", tt.user, tt.item, got, tt.want)
		}
	}
	if got := m.Accepted(); got != 7 {
		t.Errorf("accepted %d, want 7", got)
	}
	if got := m.Keys(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("keys %q", got)
	}
}

// Comments, threads and replies count the visible comments: a removed
// comment and the replies under a removed parent leave them; a comment
// recorded twice (a replayed post) counts once.
func TestModelCountsComments(t *testing.T) {
	m := NewModel(6 * time.Hour)
	for _, c := range []Comment{
		{ID: "c1", Video: "v", Author: "ann"},
		{ID: "r1", Video: "v", Parent: "c1", Author: "bob"},
		{ID: "r2", Video: "v", Parent: "c1", Author: "cat"},
		{ID: "c2", Video: "v", Author: "bob"},
		{ID: "r3", Video: "v", Parent: "c2", Author: "ann"},
		{ID: "c2", Video: "v", Author: "bob"}, // replayed
		{ID: "c3", Video: "w", Author: "cat"},
	} {
		m.AddComment(c)
	}
	want := map[string]counter.Values{
		"v":  {Comments: 5, Threads: 2},
		"w":  {Comments: 1, Threads: 1},
		"c1": {Replies: 2}, "c2": {Replies: 1}, "c3": {},
	}
	if d := cmp.Diff(want, m.Counts()); d != "" {
		t.Errorf("counts (-want +got):\n%s", d)
	}
	if got := m.Keys(); !slices.Equal(got, []string{"c1", "c2", "c3", "v", "w"}) {
		t.Errorf("keys %q: the videos and top-level comments", got)
	}
	if got := m.Listing("v", ""); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Errorf("listing of v: %q", got)
	}
	if got := m.Listing("", "c1"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Errorf("replies of c1: %q", got)
	}

	m.RemoveComments("c1", "unknown")
	m.RemoveComments("r3")
	want = map[string]counter.Values{
		"v":  {Comments: 1, Threads: 1},
		"w":  {Comments: 1, Threads: 1},
		"c1": {}, "c2": {}, "c3": {},
	}
	if d := cmp.Diff(want, m.Counts()); d != "" {
		t.Errorf("counts after removals (-want +got):\n%s", d)
	}
	if got := m.Listing("", "c1"); len(got) != 0 {
		t.Errorf("replies of a removed comment listed: %q", got)
	}
	if got := m.VisibleParents(); !slices.Equal(got, []string{"c2", "c3"}) {
		t.Errorf("visible parents %q", got)
	}
	if got := m.Videos(); !slices.Equal(got, []string{"v", "w"}) {
		t.Errorf("videos %q", got)
	}
	if got, none := m.CommentVideo("r1"), m.CommentVideo("nope"); got != "v" || none != "" {
		t.Errorf("CommentVideo: %q, %q", got, none)
	}
}

// A history holds each video once, at its latest watch accepted after the
// video's last deletion and the last clear, newest first; deletions leave
// the views.
func TestModelHistory(t *testing.T) {
	m := NewModel(6 * time.Hour)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	at := func(min int) int64 { return base.Add(time.Duration(min) * time.Minute).UnixMilli() }
	watch := func(user, video string, min int, pos float64) {
		m.AddWatch(WatchKey{User: user, Video: video, At: at(min)}, pos)
	}
	history := func(user string) []HistoryEntry { return m.History()[user] }

	watch("ann", "v1", 1, 10)
	watch("ann", "v2", 2, 20)
	watch("ann", "v1", 3, 30)
	watch("ann", "v3", 2, 5)
	watch("ann", "v2", 2, 25) // the same watch again: its new position
	watch("bob", "v1", 4, 1)
	want := []HistoryEntry{{"v1", at(3), 30}, {"v2", at(2), 25}, {"v3", at(2), 5}}
	if d := cmp.Diff(want, history("ann")); d != "" {
		t.Errorf("ann's history (-want +got):\n%s", d)
	}

	m.DeleteVideo("ann", "v1")
	watch("ann", "v1", 0, 7) // older, but accepted after the deletion
	want = []HistoryEntry{{"v2", at(2), 25}, {"v3", at(2), 5}, {"v1", at(0), 7}}
	if d := cmp.Diff(want, history("ann")); d != "" {
		t.Errorf("after deleting v1 (-want +got):\n%s", d)
	}

	m.ClearHistory("ann")
	if got := history("ann"); len(got) != 0 {
		t.Errorf("after the clear: %+v", got)
	}
	watch("ann", "v4", 5, 1)
	if d := cmp.Diff([]HistoryEntry{{"v4", at(5), 1}}, history("ann")); d != "" {
		t.Errorf("after the clear and a watch (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]HistoryEntry{{"v1", at(4), 1}}, history("bob")); d != "" {
		t.Errorf("bob's history (-want +got):\n%s", d)
	}
	// The views stay: one per user and video.
	c := m.Counts()
	if c["v1"].Views != 2 || c["v2"].Views != 1 || c["v4"].Views != 1 {
		t.Errorf("views %+v", c)
	}
	if got := len(m.Journal("ann")); got != 9 {
		t.Errorf("ann's journal holds %d writes, want 9", got)
	}
}

// Users and tokens are kept for reading back; the copy returned is the
// caller's.
func TestModelUsers(t *testing.T) {
	m := NewModel(time.Hour)
	m.AddUser("ann", "t1")
	m.AddUser("bob", "t2")
	u := m.Users()
	u["cat"] = "t3"
	if d := cmp.Diff(map[string]string{"ann": "t1", "bob": "t2"}, m.Users()); d != "" {
		t.Errorf("users (-want +got):\n%s", d)
	}
}

func TestDiffHistory(t *testing.T) {
	a := HistoryEntry{Video: "a", At: 3, Position: 1}
	b := HistoryEntry{Video: "b", At: 2, Position: 1}
	c := HistoryEntry{Video: "c", At: 1, Position: 1}
	for _, tt := range []struct {
		name      string
		got, want []HistoryEntry
		check     func(HistoryDiff) bool
	}{
		{"equal", []HistoryEntry{a, b}, []HistoryEntry{a, b}, func(d HistoryDiff) bool { return d.Empty() }},
		{"both empty", nil, nil, func(d HistoryDiff) bool { return d.Empty() }},
		{"missing", []HistoryEntry{a}, []HistoryEntry{a, b}, func(d HistoryDiff) bool {
			return len(d.Missing) == 1 && d.Missing[0] == b && len(d.Wrong)+len(d.Unexpected) == 0 && !d.Order
		}},
		{"unexpected", []HistoryEntry{a, b, c}, []HistoryEntry{a, b}, func(d HistoryDiff) bool {
			return slices.Equal(d.Unexpected, []string{"c"}) && len(d.Missing)+len(d.Wrong) == 0 && !d.Order
		}},
		{"wrong position", []HistoryEntry{a, {Video: "b", At: 2, Position: 9}}, []HistoryEntry{a, b}, func(d HistoryDiff) bool {
			return len(d.Wrong) == 1 && len(d.Missing)+len(d.Unexpected) == 0
		}},
		{"wrong time", []HistoryEntry{a, {Video: "b", At: 5, Position: 1}}, []HistoryEntry{a, b}, func(d HistoryDiff) bool {
			return len(d.Wrong) == 1 && len(d.Missing)+len(d.Unexpected) == 0
		}},
		{"order", []HistoryEntry{b, a}, []HistoryEntry{a, b}, func(d HistoryDiff) bool {
			return d.Order && len(d.Missing)+len(d.Wrong)+len(d.Unexpected) == 0
		}},
	} {
		d := DiffHistory(tt.got, tt.want)
		if !tt.check(d) {
			t.Errorf("%s: %+v", tt.name, d)
		}
		if d.Empty() != (d.String() == "") {
			t.Errorf("%s: Empty %v but String %q", tt.name, d.Empty(), d.String())
		}
	}
}

// An answer breaks the spec's promises when it is missing, a 5xx other
// than 503, a 503 without Retry-After, or later than the deadline plus
// slack.
func TestViolations(t *testing.T) {
	const deadline, slack = 10 * time.Second, time.Second
	for _, tt := range []struct {
		name string
		s    Sample
		bad  int
	}{
		{"ok", Sample{Code: 200, Latency: time.Second}, 0},
		{"a refusal", Sample{Code: 429, RetryAfter: "1"}, 0},
		{"503 with Retry-After", Sample{Code: 503, RetryAfter: "1"}, 0},
		{"at the limit", Sample{Code: 200, Latency: deadline + slack}, 0},
		{"no answer", Sample{Code: 0, Err: "refused", Latency: time.Hour}, 1},
		{"500", Sample{Code: 500}, 1},
		{"502", Sample{Code: 502}, 1},
		{"503 without Retry-After", Sample{Code: 503}, 1},
		{"late", Sample{Code: 200, Latency: deadline + slack + time.Millisecond}, 1},
		{"late and 500", Sample{Code: 500, Latency: time.Minute}, 2},
	} {
		if got := Violations([]Sample{tt.s}, deadline, slack); len(got) != tt.bad {
			t.Errorf("%s: %q, want %d violations", tt.name, got, tt.bad)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		p    int
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}, {0, time.Millisecond}} {
		if got := Percentile(ds, tt.p); got != tt.want {
			t.Errorf("p%d = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v", got)
	}
	if got := Percentile([]time.Duration{7 * time.Millisecond}, 99); got != 7*time.Millisecond {
		t.Errorf("p99 of one = %v", got)
	}
}

func TestBetweenAndCountCode(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	samples := []Sample{
		{At: t0, Op: "GET", Code: 200},
		{At: t0.Add(time.Second), Op: "GET", Code: 503},
		{At: t0.Add(time.Second), Op: "PUT", Code: 503},
		{At: t0.Add(2 * time.Second), Op: "GET", Code: 200},
	}
	if got := Between(samples, "GET", t0, t0.Add(2*time.Second)); len(got) != 2 || got[1].Code != 503 {
		t.Errorf("Between [t0, t0+2s): %+v", got)
	}
	if got := CountCode(samples, 503); got != 2 {
		t.Errorf("CountCode(503) = %d", got)
	}
}

// The viewing window is a whole number of minutes, at least the one asked
// for, and the first that holds now in its middle half.
func TestViewWindowForIsTheFirstFit(t *testing.T) {
	now := time.Date(2026, 12, 3, 7, 40, 0, 0, time.UTC)
	w := ViewWindowFor(now, 6*time.Hour)
	if w%time.Minute != 0 || w < 6*time.Hour {
		t.Fatalf("window %v", w)
	}
	for s := 6 * time.Hour; s < w; s += time.Minute {
		off := now.UnixMilli() % s.Milliseconds()
		if off >= s.Milliseconds()/4 && off < 3*s.Milliseconds()/4 {
			t.Errorf("window %v, but %v already fits", w, s)
		}
	}
}

// A watch counts as a view when dated within a window of its acceptance.
func TestCountsAsView(t *testing.T) {
	const window = time.Hour
	now := time.Now()
	for _, tt := range []struct {
		age  time.Duration
		want bool
	}{{time.Minute, true}, {window / 2, true}, {window + time.Minute, false}, {48 * time.Hour, false}} {
		k := WatchKey{User: "u", Video: "v", At: now.Add(-tt.age).UnixMilli()}
		if got := countsAsView(k, now, window); got != tt.want {
			t.Errorf("a watch %v old: counts %v, want %v", tt.age, got, tt.want)
		}
	}
}
