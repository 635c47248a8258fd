package moderation_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/moderationtest"
	"github.com/videngage/engagement/shared/moderation"
)

var t0 = time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)

// small are parameters for hand-built populations: groups of 4, overlap 3.
var small = moderation.Params{
	Window: 10 * time.Minute, MinItems: 3, MinGroup: 4, MinLift: 2, MaxItemShare: 0.5,
	YoungAge: 30 * 24 * time.Hour, MinYoungShare: 0.5, EstablishedMinItems: 5, MaxCandidates: 1000,
}

// builder assembles a population by hand.
type builder struct {
	rs    []moderation.Reaction
	first map[string]time.Time
}

func newBuilder() *builder { return &builder{first: map[string]time.Time{}} }

// react: user reacts kind to each item, the i-th at t0 + offset + i·gap.
func (b *builder) react(user, kind string, offset, gap time.Duration, items ...string) *builder {
	for i, it := range items {
		b.rs = append(b.rs, moderation.Reaction{UserID: user, ContentID: it, Reaction: kind, At: t0.Add(offset + time.Duration(i)*gap)})
	}
	return b
}

func (b *builder) young(users ...string) *builder {
	for _, u := range users {
		b.first[u] = t0.Add(-24 * time.Hour)
	}
	return b
}

func (b *builder) old(users ...string) *builder {
	for _, u := range users {
		b.first[u] = t0.Add(-365 * 24 * time.Hour)
	}
	return b
}

// background adds n unrelated accounts, each reacting to two items of its
// own: they make the population large enough for lift to mean something.
func (b *builder) background(n int) *builder {
	for i := range n {
		u := fmt.Sprintf("bg%d", i)
		b.react(u, "like", time.Duration(i)*time.Second, time.Minute, fmt.Sprintf("own%d-a", i), fmt.Sprintf("own%d-b", i))
	}
	return b
}

func (b *builder) firstSeen(users []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, u := range users {
		if t, ok := b.first[u]; ok {
			out[u] = t
		}
	}
	return out, nil
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	slices.Sort(out)
	return out
}

// ring adds n young accounts reacting to items, account i starting i·stagger
// after t0 and spacing its items by gap.
func (b *builder) ring(prefix string, n int, stagger, gap time.Duration, items ...string) []string {
	us := names(prefix, n)
	for i, u := range us {
		b.react(u, "like", time.Duration(i)*stagger, gap, items...)
	}
	b.young(us...)
	return us
}

func members(gs []moderation.Group) [][]string {
	var out [][]string
	for _, g := range gs {
		out = append(out, g.Members)
	}
	return out
}

func detect(t *testing.T, p moderation.Params, b *builder) ([]moderation.Group, moderation.Stats) {
	t.Helper()
	gs, st, err := p.Detect(b.rs, b.firstSeen)
	if err != nil {
		t.Fatal(err)
	}
	return gs, st
}

func TestRingFoundWithEvidence(t *testing.T) {
	b := newBuilder().background(40)
	ring := b.ring("r", 5, 30*time.Second, 10*time.Second, "x", "y", "z")
	gs, st := detect(t, small, b)
	if diff := cmp.Diff([][]string{ring}, members(gs)); diff != "" {
		t.Fatalf("groups (-want +got):\n%s\nstats %+v", diff, st)
	}
	want := moderation.Evidence{
		Items:       []moderation.Item{{"x", "like"}, {"y", "like"}, {"z", "like"}},
		WindowStart: t0, WindowEnd: t0.Add(4*30*time.Second + 2*10*time.Second),
		GroupSize: 5, YoungAccounts: 5,
	}
	if diff := cmp.Diff(want, gs[0].Evidence); diff != "" {
		t.Errorf("evidence (-want +got):\n%s", diff)
	}
	if st.Groups != 1 || st.Flagged != 5 || st.Clusters != 1 || st.StrongPairs != 3 {
		t.Errorf("stats %+v", st)
	}
	// The stored form reads back the same.
	back, err := moderation.DecodeEvidence(gs[0].Evidence.Encode())
	if err != nil || !cmp.Equal(back, gs[0].Evidence) {
		t.Errorf("evidence round trip: %+v %v", back, err)
	}
	if _, err := moderation.DecodeEvidence("{"); err == nil {
		t.Error("bad evidence decoded")
	}
}

// Every threshold, exactly at it and one short of it.
func TestThresholds(t *testing.T) {
	items := []string{"x", "y", "z"}
	cases := []struct {
		name  string
		build func(b *builder) []string // returns the accounts to flag (nil: none)
		p     func(p *moderation.Params)
	}{
		{"group of MinGroup", func(b *builder) []string { return b.ring("r", 4, time.Second, time.Second, items...) }, nil},
		{"group of MinGroup-1", func(b *builder) []string { b.ring("r", 3, time.Second, time.Second, items...); return nil }, nil},
		{"MinItems shared", func(b *builder) []string { return b.ring("r", 6, time.Second, time.Second, "x", "y", "z") }, nil},
		{"MinItems-1 shared", func(b *builder) []string { b.ring("r", 6, time.Second, time.Second, "x", "y"); return nil }, nil},
		{"one account's items exactly Window apart", func(b *builder) []string {
			return b.ring("r", 5, 0, 5*time.Minute, items...) // x..z span 10 min: each pair within Window
		}, nil},
		{"one account's items beyond Window", func(b *builder) []string {
			b.ring("r", 5, 0, 10*time.Minute+time.Second, items...) // consecutive items too far apart
			return nil
		}, nil},
		{"accounts exactly Window apart", func(b *builder) []string {
			// Four accounts at 0, and one more at +Window on the same items:
			// linked to all four.
			us := b.ring("r", 4, 0, time.Second, items...)
			b.react("late", "like", 10*time.Minute, time.Second, items...).young("late")
			return slices.Sorted(slices.Values(append(us, "late")))
		}, nil},
		{"accounts beyond Window apart", func(b *builder) []string {
			// Two halves of 4, 11 minutes apart: two groups, not one of 8.
			a := b.ring("a", 4, 0, time.Second, items...)
			c := names("c", 4)
			for _, u := range c {
				b.react(u, "like", 11*time.Minute, time.Second, items...)
			}
			b.young(c...)
			return slices.Concat(a, c)
		}, nil},
		{"lift at MinLift", func(b *builder) []string {
			// 4 ring accounts among N=40: each item has reach 4, c=4, lift 40·4/16 = 10.
			return b.ring("r", 4, time.Second, time.Second, items...)
		}, func(p *moderation.Params) { p.MinLift = 10 }},
		{"lift below MinLift", func(b *builder) []string {
			b.ring("r", 4, time.Second, time.Second, items...)
			return nil
		}, func(p *moderation.Params) { p.MinLift = 10.01 }},
		{"item at MaxItemShare", func(b *builder) []string {
			// 4 accounts of N=40 is 10%.
			return b.ring("r", 4, time.Second, time.Second, items...)
		}, func(p *moderation.Params) { p.MaxItemShare = 0.1; p.MinLift = 1 }},
		{"item over MaxItemShare", func(b *builder) []string {
			b.ring("r", 4, time.Second, time.Second, items...)
			return nil
		}, func(p *moderation.Params) { p.MaxItemShare = 0.099; p.MinLift = 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder().background(36)
			want := c.build(b)
			p := small
			if c.p != nil {
				c.p(&p)
			}
			gs, st := detect(t, p, b)
			var got []string
			for _, g := range gs {
				got = append(got, g.Members...)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("flagged %v, want %v (stats %+v)", got, want, st)
			}
		})
	}
}

// Mostly established accounts need EstablishedMinItems; mostly young ones
// MinItems; the share is MinYoungShare, inclusive.
func TestAccountAge(t *testing.T) {
	for _, c := range []struct {
		name  string
		young int // of 6 accounts
		items int
		want  bool
	}{
		{"all young, 3 items", 6, 3, true},
		{"half young, 3 items", 3, 3, true},
		{"2 of 6 young, 3 items", 2, 3, false},
		{"none young, 4 items", 0, 4, false},
		{"none young, 5 items", 0, 5, true},
		{"none young, 7 items", 0, 7, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder().background(60)
			items := []string{"a", "b", "c", "d", "e", "f", "g"}[:c.items]
			us := names("r", 6)
			for _, u := range us {
				b.react(u, "like", 0, time.Second, items...)
			}
			b.young(us[:c.young]...)
			b.old(us[c.young:]...)
			gs, st := detect(t, small, b)
			if got := len(gs) == 1 && len(gs[0].Members) == 6; got != c.want || (!c.want && len(gs) != 0) {
				t.Fatalf("groups %v, want flagged %v (stats %+v)", members(gs), c.want, st)
			}
			if c.want && gs[0].Evidence.YoungAccounts != c.young {
				t.Errorf("young accounts %d, want %d", gs[0].Evidence.YoungAccounts, c.young)
			}
			if !c.want && st.Established != 1 {
				t.Errorf("stats %+v: want one group left as established", st)
			}
		})
	}
	// Accounts firstSeen leaves out are established; an error stops.
	b := newBuilder().background(40)
	b.ring("r", 5, time.Second, time.Second, "x", "y", "z")
	gs, _, err := small.Detect(b.rs, func([]string) (map[string]time.Time, error) { return nil, nil })
	if err != nil || len(gs) != 0 {
		t.Errorf("unknown ages: %v %v, want nothing flagged", members(gs), err)
	}
	boom := errors.New("boom")
	if _, _, err := small.Detect(b.rs, func([]string) (map[string]time.Time, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("first-seen error: %v", err)
	}
}

// Likes and dislikes of an item are different signals; a ring that dislikes
// is found as one that likes.
func TestReactionKindsApart(t *testing.T) {
	b := newBuilder().background(40)
	us := names("r", 6)
	for i, u := range us {
		kind := "like"
		if i%2 == 1 {
			kind = "dislike"
		}
		b.react(u, kind, 0, time.Second, "x", "y", "z")
	}
	b.young(us...)
	if gs, st := detect(t, small, b); len(gs) != 0 {
		t.Fatalf("3 likers and 3 dislikers made a group: %v %+v", members(gs), st)
	}
	b = newBuilder().background(40)
	ring := names("r", 5)
	for _, u := range ring {
		b.react(u, "dislike", 0, time.Second, "x", "y", "z")
	}
	b.young(ring...)
	gs, _ := detect(t, small, b)
	if len(gs) != 1 || !slices.Equal(gs[0].Members, ring) || gs[0].Evidence.Items[0].Reaction != "dislike" {
		t.Fatalf("dislike ring: %+v", gs)
	}
}

// The k-core: accounts linked to fewer than MinGroup-1 others of the group
// are peeled off, and their leaving can peel others.
func TestCorePeelsLooseAccounts(t *testing.T) {
	b := newBuilder().background(60)
	ring := b.ring("r", 5, time.Second, time.Second, "x", "y", "z", "w")
	// A hanger-on shares 3 items with two ring accounts only... it cannot:
	// sharing x,y,z links it to every ring account. Instead it shares
	// 3 items with another hanger-on and 2 with the ring.
	b.react("h1", "like", 0, time.Second, "x", "y", "p", "q", "s").young("h1")
	b.react("h2", "like", 0, time.Second, "p", "q", "s").young("h2")
	gs, st := detect(t, small, b)
	if len(gs) != 1 || !slices.Equal(gs[0].Members, ring) {
		t.Fatalf("groups %v, want the ring alone (stats %+v)", members(gs), st)
	}
}

// Duplicate rows of one account on one item count once, at the later time.
func TestDuplicatesCountOnce(t *testing.T) {
	b := newBuilder().background(40)
	ring := b.ring("r", 4, time.Second, time.Second, "x", "y", "z")
	// The last ring account's rows twice: still 4 accounts, not 5 reactions
	// per item.
	b.react(ring[3], "like", time.Minute, time.Second, "x", "y", "z")
	gs, st := detect(t, small, b)
	if len(gs) != 1 || gs[0].Evidence.GroupSize != 4 || !gs[0].Evidence.WindowEnd.Equal(t0.Add(time.Minute+2*time.Second)) {
		t.Fatalf("groups %+v stats %+v", gs, st)
	}
}

func TestMaxCandidatesSkipsACluster(t *testing.T) {
	b := newBuilder().background(40)
	b.ring("r", 6, time.Second, time.Second, "x", "y", "z")
	p := small
	p.MaxCandidates = 5
	gs, st := detect(t, p, b)
	if len(gs) != 0 || st.Skipped != 1 {
		t.Fatalf("groups %v stats %+v, want the cluster skipped", members(gs), st)
	}
}

func TestEvidenceNamesTheItemsHalfTheGroupReacted(t *testing.T) {
	b := newBuilder().background(60)
	ring := b.ring("r", 6, time.Second, time.Second, "x", "y", "z")
	// Half the ring also likes w, a third likes v.
	for _, u := range ring[:3] {
		b.react(u, "like", 10*time.Second, time.Second, "w")
	}
	for _, u := range ring[:2] {
		b.react(u, "like", 20*time.Second, time.Second, "v")
	}
	gs, _ := detect(t, small, b)
	if len(gs) != 1 {
		t.Fatalf("groups %v", members(gs))
	}
	var got []string
	for _, it := range gs[0].Evidence.Items {
		got = append(got, it.ContentID)
	}
	// w's reach (3) is under MinGroup, so it is no strong pair's item and
	// not in the cluster: evidence names only what linked the group.
	if want := []string{"x", "y", "z"}; !slices.Equal(got, want) {
		t.Errorf("items %v, want %v", got, want)
	}
}

func TestValidate(t *testing.T) {
	if err := moderation.DefaultParams.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(*moderation.Params){
		func(p *moderation.Params) { p.Window = 0 },
		func(p *moderation.Params) { p.MinItems = 1 },
		func(p *moderation.Params) { p.MinGroup = 1 },
		func(p *moderation.Params) { p.MinLift = 0.5 },
		func(p *moderation.Params) { p.MaxItemShare = 0 },
		func(p *moderation.Params) { p.MaxItemShare = 1.5 },
		func(p *moderation.Params) { p.EstablishedMinItems = 2 },
		func(p *moderation.Params) { p.MinYoungShare = -0.1 },
		func(p *moderation.Params) { p.MaxCandidates = 3 },
	} {
		p := moderation.DefaultParams
		f(&p)
		if _, _, err := p.Detect(nil, nil); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if gs, st, err := moderation.DefaultParams.Detect(nil, nil); err != nil || gs != nil || st.Reactions != 0 {
		t.Errorf("empty input: %v %+v %v", gs, st, err)
	}
}

// The generated scenarios: every ring the design means to catch is caught
// whole, and nobody else is flagged, in any of them.
func TestScenarios(t *testing.T) {
	end := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for _, s := range moderationtest.Scenarios() {
		t.Run(s.Name, func(t *testing.T) {
			w := s.Population.Generate(end)
			gs, st, err := moderation.DefaultParams.Detect(w.Reactions, w.FirstSeenOf)
			if err != nil {
				t.Fatal(err)
			}
			sc := w.ScoreOf(gs)
			if sc.Precision() != 1 {
				t.Errorf("precision %.3f: %d flagged, %d of them ring accounts (stats %+v)", sc.Precision(), sc.Flagged, sc.TruePositives, st)
			}
			if want := s.WantRecall; sc.Recall() != want {
				t.Errorf("recall %.3f, want %.0f (stats %+v)", sc.Recall(), want, st)
			}
		})
	}
}

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []moderation.Cursor{
		{At: t0, UserID: "alice"},
		{At: time.Unix(0, 0).UTC(), UserID: "a.b.c"},
		{At: t0.Add(123456789), UserID: "ünïcode user/with spaces"},
	} {
		got, err := moderation.ParseCursor(c.String())
		if err != nil || !got.At.Equal(c.At) || got.UserID != c.UserID {
			t.Errorf("ParseCursor(%q) = %+v, %v; want %+v", c.String(), got, err, c)
		}
	}
	for _, bad := range []string{"", "abc", "zz!.user", "1.", ".user"} {
		if _, err := moderation.ParseCursor(bad); !errors.Is(err, moderation.ErrBadCursor) {
			t.Errorf("ParseCursor(%q): %v", bad, err)
		}
	}
}
