package comment

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"

	"github.com/videngage/engagement/shared/pagetoken"
)

func TestValidateText(t *testing.T) {
	ok := []string{"a", "héllo wörld", "  x  ", strings.Repeat("é", MaxTextChars), strings.Repeat("😀", MaxTextChars), "line\nbreak",
		"see https://example.com/a and www.example.org", "node.js and e.g. 3.14 are no links", "bit.ly/x"}
	for _, s := range ok {
		if err := ValidateText(s); err != nil {
			t.Errorf("ValidateText(%.20q): %v", s, err)
		}
	}
	bad := map[string]error{
		"":                                  ErrEmptyText,
		" \t\n\u00a0\u3000":                 ErrEmptyText,
		strings.Repeat("a", MaxTextChars+1): ErrTextTooLong,
		strings.Repeat("😀", MaxTextChars+1): ErrTextTooLong,
		"abc\xff":                           ErrInvalidUTF8,
		"\xed\xa0\x80":                      ErrInvalidUTF8, // an encoded surrogate
		"https://a.example http://b.example www.c.example": ErrTooManyLinks,
		"buy: bit.ly/a bit.ly/b\nHTTPS://x.example/c":      ErrTooManyLinks,
	}
	for s, want := range bad {
		if err := ValidateText(s); !errors.Is(err, want) {
			t.Errorf("ValidateText(%.20q) = %v, want %v", s, err, want)
		}
	}
}

func TestCountLinks(t *testing.T) {
	for s, want := range map[string]int{
		"no links here. or here.":                       0,
		"node.js, e.g. v1.2, 3.14, a.b":                 0,
		"https://example.com":                           1,
		"see www.example.com, then ftp://files.example": 2,
		"short: bit.ly/abc and t.co/x?y=1":              2,
		"(https://a.example/x)(https://b.example/y)":    2,
		"mail me at someone@example.com":                0,
	} {
		if got := CountLinks(s); got != want {
			t.Errorf("CountLinks(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestValidateIdempotencyKey(t *testing.T) {
	for _, k := range []string{"a", "6f1c2b9e-1d2a-4c1e-9a51-3f3b2d8c7e10", strings.Repeat("k", MaxIdempotencyKeyLen), "with space ~!"} {
		if err := ValidateIdempotencyKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", MaxIdempotencyKeyLen+1), "tab\there", "é", "nul\x00"} {
		if err := ValidateIdempotencyKey(k); !errors.Is(err, ErrIdempotencyKey) {
			t.Errorf("%q: %v, want ErrIdempotencyKey", k, err)
		}
	}
}

func TestNewIDIsAValidUniqueNonMonotonicID(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	seen := map[string]bool{}
	prev := ""
	ascending := 0
	const n = 10000
	for i := 0; i < n; i++ {
		id := NewID()
		if !pattern.MatchString(id) || !counter.ValidKey(id) {
			t.Fatalf("NewID() = %q: not a valid comment id", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
		if id > prev {
			ascending++
		}
		prev = id
	}
	// Time-ordered ids would ascend every time; random ones about half.
	if ascending > n*6/10 || ascending < n*4/10 {
		t.Errorf("%d of %d ids ascend: not spread over the key space", ascending, n)
	}
}

func TestRequestHash(t *testing.T) {
	a := RequestHash("v", "", "text")
	if string(a) != string(RequestHash("v", "", "text")) {
		t.Error("not deterministic")
	}
	for _, other := range [][]byte{RequestHash("v", "", "text2"), RequestHash("v2", "", "text"), RequestHash("v", "p", "text"), RequestHash("v", "", "")} {
		if string(a) == string(other) {
			t.Error("two requests share a hash")
		}
	}
	// Length prefixes keep the parts apart.
	if string(RequestHash("ab", "", "c")) == string(RequestHash("a", "", "bc")) {
		t.Error("parts run together")
	}
}

// A keyed post's id is a valid comment id, the same for the same user and
// key, another for another user or key, and spread like NewID's.
func TestKeyedID(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)
	a := KeyedID("alice", "key-1")
	if !pattern.MatchString(a) || !counter.ValidKey(a) || len(a) != len(NewID()) {
		t.Fatalf("KeyedID = %q: not a comment id like NewID's", a)
	}
	if KeyedID("alice", "key-1") != a {
		t.Error("not deterministic")
	}
	for _, other := range []string{KeyedID("bob", "key-1"), KeyedID("alice", "key-2"), KeyedID("alicek", "ey-1"), KeyedID("", "alicekey-1")} {
		if other == a {
			t.Errorf("another user or key has the id %q", a)
		}
	}
	ascending, prev := 0, ""
	const n = 10000
	for i := range n {
		id := KeyedID("u", fmt.Sprint(i))
		if id > prev {
			ascending++
		}
		prev = id
	}
	if ascending > n*6/10 || ascending < n*4/10 {
		t.Errorf("%d of %d ids of consecutive keys ascend: not spread over the key space", ascending, n)
	}
}

func TestCheckParent(t *testing.T) {
	top := Comment{ID: "p", VideoID: "v", Status: Visible}
	cases := []struct {
		name   string
		parent Comment
		found  bool
		want   error
	}{
		{"visible top-level of the video", top, true, nil},
		{"missing", Comment{}, false, ErrParentNotFound},
		{"deleted", Comment{ID: "p", VideoID: "v", Status: Deleted}, true, ErrParentNotFound},
		{"spam", Comment{ID: "p", VideoID: "v", Status: Spam}, true, ErrParentNotFound},
		{"a reply", Comment{ID: "p", VideoID: "v", ParentID: "q", Status: Visible}, true, ErrParentIsReply},
		{"another video", Comment{ID: "p", VideoID: "w", Status: Visible}, true, ErrParentElsewhere},
	}
	for _, c := range cases {
		if err := CheckParent("v", c.parent, c.found); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestPostEvent(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	top := PostEvent(Comment{ID: "c1", VideoID: "v"}, now)
	want := events.Event{ID: PostEventID("c1"), Kind: events.KindCounterDelta, Outbox: true, Time: now,
		Deltas: []counter.Delta{{Key: "v", Field: counter.Comments, N: 1}, {Key: "v", Field: counter.Threads, N: 1}}}
	if diff := cmp.Diff(want, top); diff != "" {
		t.Errorf("top-level post (-want +got):\n%s", diff)
	}
	reply := PostEvent(Comment{ID: "c2", VideoID: "v", ParentID: "c1"}, now)
	want.ID = PostEventID("c2")
	want.Deltas = []counter.Delta{{Key: "v", Field: counter.Comments, N: 1}, {Key: "c1", Field: counter.Replies, N: 1}}
	if diff := cmp.Diff(want, reply); diff != "" {
		t.Errorf("reply post (-want +got):\n%s", diff)
	}
	if err := reply.Validate(); err != nil {
		t.Error(err)
	}
	if PostEventID("c1") == PostEventID("c2") || PostEventID("c1") != PostEventID("c1") {
		t.Error("post event ids must be one per comment")
	}
}

func TestTransitionTable(t *testing.T) {
	cases := []struct {
		from, to Status
		next     Status
		changed  bool
	}{
		{Visible, Deleted, Deleted, true},
		{Visible, Spam, Spam, true},
		{Deleted, Deleted, Deleted, false},
		{Deleted, Spam, Spam, true},
		{Spam, Spam, Spam, false},
		{Spam, Deleted, Spam, false},
	}
	for _, c := range cases {
		next, changed, err := Transition(c.from, c.to)
		if err != nil || next != c.next || changed != c.changed {
			t.Errorf("Transition(%s, %s) = %s, %v, %v; want %s, %v", c.from, c.to, next, changed, err, c.next, c.changed)
		}
	}
	for _, from := range []Status{Visible, Deleted, Spam} {
		if _, _, err := Transition(from, Visible); err == nil {
			t.Errorf("Transition(%s, visible) accepted: comments never come back", from)
		}
	}
}

func TestParseStatus(t *testing.T) {
	for _, s := range []Status{Visible, Deleted, Spam} {
		if got, err := ParseStatus(string(s)); err != nil || got != s {
			t.Errorf("ParseStatus(%s) = %s, %v", s, got, err)
		}
	}
	if _, err := ParseStatus("hidden"); err == nil {
		t.Error("unknown status accepted")
	}
}

func vals(comments, threads, replies int64) counter.Values {
	return counter.Values{Comments: comments, Threads: threads, Replies: replies}
}

func TestPlanRemoval(t *testing.T) {
	top := func(id string, s Status) Comment { return Comment{ID: id, VideoID: "v", Status: s} }
	reply := func(id, parent string, s Status) Comment {
		return Comment{ID: id, VideoID: "v", ParentID: parent, Status: s}
	}
	cases := []struct {
		name        string
		r           Removal
		changed     []string
		leftVisible []string
		deltas      map[string]counter.Values
	}{
		{
			name:        "delete a visible top-level comment without replies",
			r:           Removal{To: Deleted, Targets: []Comment{top("a", Visible)}},
			changed:     []string{"a"},
			leftVisible: []string{"a"},
			deltas:      map[string]counter.Values{"v": vals(-1, -1, 0)},
		},
		{
			name:        "delete a parent with three visible replies",
			r:           Removal{To: Deleted, Targets: []Comment{top("a", Visible)}, VisibleReplies: map[string]int64{"a": 3}},
			changed:     []string{"a"},
			leftVisible: []string{"a"},
			deltas:      map[string]counter.Values{"v": vals(-4, -1, 0), "a": vals(0, 0, -3)},
		},
		{
			name:        "delete a reply of a visible parent",
			r:           Removal{To: Deleted, Targets: []Comment{reply("r", "a", Visible)}, ParentStatus: map[string]Status{"a": Visible}},
			changed:     []string{"r"},
			leftVisible: []string{"r"},
			deltas:      map[string]counter.Values{"v": vals(-1, 0, 0), "a": vals(0, 0, -1)},
		},
		{
			name:        "delete a reply of a removed parent: no count moves",
			r:           Removal{To: Deleted, Targets: []Comment{reply("r", "a", Visible)}, ParentStatus: map[string]Status{"a": Spam}},
			changed:     []string{"r"},
			leftVisible: []string{"r"},
			deltas:      map[string]counter.Values{},
		},
		{
			name:    "already deleted: nothing",
			r:       Removal{To: Deleted, Targets: []Comment{top("a", Deleted)}},
			changed: nil,
			deltas:  map[string]counter.Values{},
		},
		{
			name:    "spam over deleted: recorded, no count",
			r:       Removal{To: Spam, Targets: []Comment{top("a", Deleted), reply("r", "b", Deleted)}, ParentStatus: map[string]Status{"b": Visible}},
			changed: []string{"a", "r"},
			deltas:  map[string]counter.Values{},
		},
		{
			name: "sweep of a parent and its replies: replies counted once, through the parent",
			r: Removal{To: Spam,
				Targets:        []Comment{reply("r1", "a", Visible), top("a", Visible), reply("r2", "a", Visible), reply("r3", "a", Deleted)},
				ParentStatus:   map[string]Status{"a": Visible},
				VisibleReplies: map[string]int64{"a": 5}},
			changed:     []string{"r1", "a", "r2", "r3"},
			leftVisible: []string{"a", "r1", "r2"},
			deltas:      map[string]counter.Values{"v": vals(-6, -1, 0), "a": vals(0, 0, -5)},
		},
		{
			name: "sweep over two videos and many comments: one delta per counter",
			r: Removal{To: Spam,
				Targets: []Comment{top("a", Visible), top("b", Visible), {ID: "c", VideoID: "w", Status: Visible},
					reply("r1", "p", Visible), reply("r2", "p", Visible), reply("r3", "q", Visible), reply("r4", "gone", Visible)},
				ParentStatus:   map[string]Status{"p": Visible, "q": Visible},
				VisibleReplies: map[string]int64{"b": 2}},
			changed:     []string{"a", "b", "c", "r1", "r2", "r3", "r4"},
			leftVisible: []string{"a", "b", "c", "r1", "r2", "r3", "r4"},
			deltas: map[string]counter.Values{
				"v": vals(-1-3-1-1-1, -2, 0), "w": vals(-1, -1, 0), "b": vals(0, 0, -2), "p": vals(0, 0, -2), "q": vals(0, 0, -1),
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanRemoval(c.r)
			if err != nil {
				t.Fatal(err)
			}
			var changed []string
			for _, ch := range p.Changed {
				if ch.Status != c.r.To {
					t.Errorf("%s changed to %s, want %s", ch.ID, ch.Status, c.r.To)
				}
				changed = append(changed, ch.ID)
			}
			if diff := cmp.Diff(c.changed, changed); diff != "" {
				t.Errorf("changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.leftVisible, p.LeftVisible); diff != "" {
				t.Errorf("left visible (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.deltas, p.Deltas); diff != "" {
				t.Errorf("deltas (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanRemovalRefusesDuplicatesAndRestores(t *testing.T) {
	c := Comment{ID: "a", VideoID: "v", Status: Visible}
	if _, err := PlanRemoval(Removal{To: Deleted, Targets: []Comment{c, c}}); err == nil {
		t.Error("a comment named twice was planned")
	}
	if _, err := PlanRemoval(Removal{To: Visible, Targets: []Comment{c}}); err == nil {
		t.Error("a removal to visible was planned")
	}
}

// world is a model of stored comments for the property test.
type world map[string]*Comment

// truth counts by the rule: visible top-level comments and visible replies
// of visible parents on their video; visible replies of a visible parent on
// the parent.
func (w world) truth() map[string]counter.Values {
	out := map[string]counter.Values{}
	add := func(k string, f counter.Field) {
		v := out[k]
		v.Add(f, 1)
		out[k] = v
	}
	for _, c := range w {
		if c.Status != Visible {
			continue
		}
		if !c.IsReply() {
			add(c.VideoID, counter.Comments)
			add(c.VideoID, counter.Threads)
			continue
		}
		if p := w[c.ParentID]; p != nil && p.Status == Visible {
			add(c.VideoID, counter.Comments)
			add(c.ParentID, counter.Replies)
		}
	}
	return out
}

// removal reads what the store's transaction reads.
func (w world) removal(to Status, ids []string) Removal {
	r := Removal{To: to, ParentStatus: map[string]Status{}, VisibleReplies: map[string]int64{}}
	for _, id := range ids {
		c := w[id]
		r.Targets = append(r.Targets, *c)
		if c.IsReply() {
			r.ParentStatus[c.ParentID] = w[c.ParentID].Status
		} else if c.Status == Visible {
			for _, o := range w {
				if o.ParentID == c.ID && o.Status == Visible {
					r.VisibleReplies[c.ID]++
				}
			}
		}
	}
	return r
}

func nonZero(m map[string]counter.Values) map[string]counter.Values {
	out := map[string]counter.Values{}
	for k, v := range m {
		if !v.IsZero() {
			out[k] = v
		}
	}
	return out
}

// TestPlanRemovalKeepsCountersExact runs random removals (deletes and spam
// sweeps of random batches, parents and replies mixed, already removed
// comments included) over random threads and checks after every batch that
// the counters, moved only by the plans' deltas, equal the recount: every
// comment leaves the counts exactly once, and no counter goes below zero.
func TestPlanRemovalKeepsCountersExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 300; round++ {
		w := world{}
		var ids, tops []string
		for i := 0; i < 12; i++ {
			id := fmt.Sprintf("t%d", i)
			w[id] = &Comment{ID: id, VideoID: fmt.Sprintf("v%d", rng.IntN(3)), Status: Visible}
			ids, tops = append(ids, id), append(tops, id)
		}
		for i := 0; i < 30; i++ {
			p := w[tops[rng.IntN(len(tops))]]
			id := fmt.Sprintf("r%d", i)
			w[id] = &Comment{ID: id, VideoID: p.VideoID, ParentID: p.ID, Status: Visible}
			ids = append(ids, id)
		}
		counters := w.truth()
		for step := 0; step < 8; step++ {
			to := Deleted
			if rng.IntN(2) == 0 {
				to = Spam
			}
			n := 1 + rng.IntN(10)
			pick := map[string]bool{}
			var batch []string
			for len(batch) < n {
				id := ids[rng.IntN(len(ids))]
				if !pick[id] {
					pick[id] = true
					batch = append(batch, id)
				}
			}
			p, err := PlanRemoval(w.removal(to, batch))
			if err != nil {
				t.Fatal(err)
			}
			for k, d := range p.Deltas {
				if d.Comments > 0 || d.Threads > 0 || d.Replies > 0 || d.IsZero() {
					t.Fatalf("round %d: delta %+v on %s: removals only decrement", round, d, k)
				}
				counters[k] = counters[k].Plus(d)
				if counters[k].Comments < 0 || counters[k].Threads < 0 || counters[k].Replies < 0 {
					t.Fatalf("round %d: counter %s went negative: %+v", round, k, counters[k])
				}
			}
			for _, c := range p.Changed {
				*w[c.ID] = c
			}
			if diff := cmp.Diff(nonZero(w.truth()), nonZero(counters)); diff != "" {
				t.Fatalf("round %d step %d: counters differ from the truth (-truth +counters):\n%s", round, step, diff)
			}
			for _, e := range p.Events(time.Now()) {
				if err := e.Validate(); err != nil {
					t.Fatalf("event %s: %v", e.ID, err)
				}
			}
		}
	}
}

func TestPlanEvents(t *testing.T) {
	p := Plan{LeftVisible: []string{"a", "b"}, Deltas: map[string]counter.Values{}}
	for i := 0; i < 20; i++ {
		p.Deltas[fmt.Sprintf("k%02d", i)] = vals(-1, 0, -2)
	}
	now := time.Now()
	evs := p.Events(now)
	if len(evs) != 3 { // 40 deltas in events of at most 16
		t.Fatalf("%d events, want 3", len(evs))
	}
	sums := map[string]counter.Values{}
	ids := map[string]bool{}
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
		if !e.Outbox || e.Kind != events.KindCounterDelta || !e.Time.Equal(now) {
			t.Errorf("event %+v", e)
		}
		ids[e.ID] = true
		for _, d := range e.Deltas {
			v := sums[d.Key]
			v.Add(d.Field, d.N)
			sums[d.Key] = v
		}
	}
	if len(ids) != 3 {
		t.Error("event ids repeat")
	}
	if diff := cmp.Diff(p.Deltas, sums); diff != "" {
		t.Errorf("events do not carry the deltas (-want +got):\n%s", diff)
	}
	again := p.Events(now)
	if diff := cmp.Diff(evs, again); diff != "" {
		t.Errorf("events not deterministic:\n%s", diff)
	}
	other := Plan{LeftVisible: []string{"a", "c"}, Deltas: p.Deltas}
	if other.Events(now)[0].ID == evs[0].ID {
		t.Error("two removals share an event id")
	}
	if len((Plan{}).Events(now)) != 0 {
		t.Error("an empty plan has events")
	}
}

func TestPageTokens(t *testing.T) {
	p := NewPageTokens("secret")
	c := Cursor{CreateTime: time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.UTC), CommentID: "Abc-_9"}
	l := VideoListing("vid")
	tok := p.Encode(l, c)
	got, err := p.Decode(l, tok)
	if err != nil || !got.CreateTime.Equal(c.CreateTime) || got.CommentID != c.CommentID {
		t.Fatalf("Decode = %+v, %v", got, err)
	}
	for name, bad := range map[string]struct {
		l   Listing
		tok string
	}{
		"other video":    {VideoListing("vid2"), tok},
		"replies":        {RepliesListing("vid"), tok},
		"other secret":   {l, NewPageTokens("other").Encode(l, c)},
		"no mac":         {l, strings.Split(tok, ".")[0]},
		"garbage":        {l, "!!!.???"},
		"empty":          {l, ""},
		"altered":        {l, "x" + tok[1:]},
		"truncated mac":  {l, tok[:len(tok)-2]},
		"altered cursor": {l, strings.Split(p.Encode(l, Cursor{CreateTime: c.CreateTime, CommentID: "other"}), ".")[0] + "." + strings.Split(tok, ".")[1]},
	} {
		if _, err := p.Decode(bad.l, bad.tok); !errors.Is(err, pagetoken.ErrInvalid) {
			t.Errorf("%s: %v, want pagetoken.ErrInvalid", name, err)
		}
	}
	if strings.Contains(tok, "Abc") {
		t.Error("token shows the cursor in clear")
	}
}

func FuzzPageToken(f *testing.F) {
	p := NewPageTokens("secret")
	f.Add(p.Encode(VideoListing("v"), Cursor{CreateTime: time.Unix(1, 2), CommentID: "c"}))
	f.Add("")
	f.Add("a.b")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := p.Decode(VideoListing("v"), tok)
		if err != nil {
			return
		}
		// Anything accepted re-encodes to a token that opens the same cursor.
		again, err := p.Decode(VideoListing("v"), p.Encode(VideoListing("v"), c))
		if err != nil || !again.CreateTime.Equal(c.CreateTime) || again.CommentID != c.CommentID {
			t.Fatalf("round trip of %+v: %+v, %v", c, again, err)
		}
	})
}

func TestCheckJSONText(t *testing.T) {
	good := []string{
		`{"text":"plain"}`,
		`{"text":"h\u00e9llo"}`,
		`{"text":"emoji \ud83d\ude00"}`,
		`{"text":"escaped backslash then u: \\ud800"}`,
		`{"text":"quote \" inside","parentId":"x"}`,
		`{"text":"é literal"}`,
		`{"text":"\uFFFD is a real character"}`,
	}
	for _, s := range good {
		if err := CheckJSONText([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := []string{
		"{\"text\":\"\xff\"}",
		"{\"text\":\"\xed\xa0\x80\"}",
		`{"text":"lone high \ud800"}`,
		`{"text":"lone high at end \ud83d"}`,
		`{"text":"high then letter \ud83dx"}`,
		`{"text":"high then high \ud83d\ud83d"}`,
		`{"text":"lone low \ude00"}`,
		`{"text":"ok","parentId":"\udfff"}`,
	}
	for _, s := range bad {
		if err := CheckJSONText([]byte(s)); !errors.Is(err, ErrInvalidUTF8) {
			t.Errorf("%s: %v, want ErrInvalidUTF8", s, err)
		}
	}
}

// FuzzCheckJSONText: a document accepted whose text decodes holds U+FFFD
// only where the document wrote one (encoding/json's replacement of bad
// input never goes unnoticed).
func FuzzCheckJSONText(f *testing.F) {
	for _, s := range []string{`{"text":"a"}`, `{"text":"\ud800"}`, "{\"text\":\"\xff\"}", `{"text":"\ud83d\ude00"}`, `"\\u"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := CheckJSONText(doc)
		var s string
		if json.Unmarshal(doc, &s) != nil {
			return
		}
		if err == nil && strings.ContainsRune(s, '\uFFFD') && !strings.Contains(string(doc), "\uFFFD") &&
			!strings.Contains(strings.ToLower(string(doc)), `\ufffd`) {
			t.Fatalf("accepted %q, which decodes to %q", doc, s)
		}
	})
}
