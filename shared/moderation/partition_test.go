package moderation_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/moderationtest"
	"github.com/videngage/engagement/shared/moderation"
)

func flaggedOf(gs []moderation.Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Members...)
	}
	slices.Sort(out)
	return out
}

// Partitions and merge flag exactly the accounts one detection over the
// whole step flags, in every scenario and whatever the partitions.
func TestMergeFindsWhatOneDetectionFinds(t *testing.T) {
	p := moderation.DefaultParams
	for _, s := range moderationtest.Scenarios() {
		w := s.Population.Generate(t0)
		whole, _, err := p.Detect(w.Reactions, w.FirstSeenOf)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 7, 64} {
			parts, _ := moderationtest.Partitioned(p, w.Reactions, n, w.Start, w.End)
			merged, st, err := p.Merge(parts, w.FirstSeenOf)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := flaggedOf(merged), flaggedOf(whole); !slices.Equal(got, want) {
				t.Errorf("%s, %d partitions: merge flags %d accounts, one detection %d", s.Name, n, len(got), len(want))
			}
			if st.Reactions != len(w.Reactions) {
				t.Errorf("%s, %d partitions: %d reactions scanned, want %d", s.Name, n, st.Reactions, len(w.Reactions))
			}
			if sc := w.ScoreOf(merged); sc.Precision() < 1 || sc.Recall() < s.WantRecall {
				t.Errorf("%s, %d partitions: precision %.3f recall %.3f", s.Name, n, sc.Precision(), sc.Recall())
			}
		}
	}
}

// An item reacted to by more than MaxItemReach accounts keeps only its
// count: its reactions are not candidates.
func TestScanLeavesPopularItemsOut(t *testing.T) {
	p := moderation.DefaultParams
	p.MaxItemReach = 30
	s := p.NewScan(t0, t0.Add(time.Hour))
	for i := range 31 {
		s.Add(moderation.Reaction{UserID: fmt.Sprint("u", i), ContentID: "hot", Reaction: "like", At: t0.Add(time.Duration(i) * time.Minute)})
	}
	for i := range 25 {
		s.Add(moderation.Reaction{UserID: fmt.Sprint("u", i), ContentID: "mid", Reaction: "like", At: t0.Add(time.Duration(i) * time.Minute)})
	}
	for i := range 5 {
		s.Add(moderation.Reaction{UserID: fmt.Sprint("u", i), ContentID: "rare", Reaction: "like", At: t0})
	}
	part, _ := s.Finish()
	if part.Rows != 61 || part.Popular != 1 || len(part.Candidates) != 25 {
		t.Fatalf("rows %d, popular %d, candidates %d: want 61, 1 and mid's 25", part.Rows, part.Popular, len(part.Candidates))
	}
}

// An item whose reactions rise a thousandfold within a minute over its own
// rate of the half hour before is reported with its evidence; a steadily
// popular item, a new item's first reactions and a rise under the factor
// are not.
func TestSpike(t *testing.T) {
	p := moderation.DefaultParams
	from, to := t0, t0.Add(5*time.Minute)
	var rs []moderation.Reaction
	add := func(item string, at time.Time, n int) {
		for i := range n {
			rs = append(rs, moderation.Reaction{UserID: fmt.Sprintf("%s-%d-%d", item, at.Unix(), i), ContentID: item, Reaction: "like", At: at.Add(time.Duration(i) * time.Millisecond)})
		}
	}
	// spiked: 3 reactions in the 30 minutes before (0.1 a minute), then
	// 150 in the step's third minute: 1,500 times.
	for i := range 3 {
		add("spiked", from.Add(-time.Duration(10*i+5)*time.Minute), 1)
	}
	add("spiked", from.Add(2*time.Minute+10*time.Second), 150)
	// steady: 200 a minute throughout.
	for m := -30; m < 5; m++ {
		add("steady", from.Add(time.Duration(m)*time.Minute), 200)
	}
	// fresh: no reactions before, 60 in one minute (under 1,000 × 0.1).
	add("fresh", from.Add(time.Minute), 60)
	// tenfold: 5 a minute before, 50 in one minute.
	for m := -30; m < 0; m++ {
		add("tenfold", from.Add(time.Duration(m)*time.Minute), 5)
	}
	add("tenfold", from.Add(3*time.Minute), 50)
	// old spike: before the step, judged by the step before.
	add("before", from.Add(-2*time.Minute), 150)

	_, spikes := moderationtest.Partitioned(p, rs, 4, from, to)
	var got []moderation.Spike
	for _, s := range spikes {
		got = append(got, s...)
	}
	if len(got) != 1 {
		t.Fatalf("spikes %+v, want the one of spiked", got)
	}
	sp := got[0]
	if sp.Item != (moderation.Item{ContentID: "spiked", Reaction: "like"}) || !sp.Minute.Equal(from.Add(2*time.Minute)) ||
		sp.Reactions != 150 || sp.Baseline != 0.1 {
		t.Errorf("spike %+v", sp)
	}
	ev := sp.Evidence(p.SpikeBaseline)
	if ev.PerMinute != 150 || ev.BaselinePerMinute == nil || *ev.BaselinePerMinute != 0.1 ||
		!ev.BaselineStart.Equal(sp.Minute.Add(-30*time.Minute)) || !ev.WindowEnd.Equal(sp.Minute.Add(time.Minute)) {
		t.Errorf("evidence %+v", ev)
	}
}

// The merge cut into shares by buckets of items flags exactly the accounts
// one detection over the whole step flags, in every scenario and whatever
// the partitions and buckets, and no share holds more than two buckets'
// candidates.
func TestMergeSharesFindWhatOneDetectionFinds(t *testing.T) {
	p := moderation.DefaultParams
	for _, s := range moderationtest.Scenarios() {
		w := s.Population.Generate(t0)
		whole, wst, err := p.Detect(w.Reactions, w.FirstSeenOf)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ partitions, buckets int }{{1, 1}, {7, 2}, {7, 7}, {64, 5}, {64, 16}} {
			parts, _ := moderationtest.Partitioned(p, w.Reactions, c.partitions, w.Start, w.End)
			got, st, largest, err := moderationtest.MergedInShares(p, parts, c.buckets, w.FirstSeenOf)
			if err != nil {
				t.Fatal(err)
			}
			if st.StrongPairs != wst.StrongPairs || st.Clusters != wst.Clusters || st.Groups != wst.Groups {
				t.Errorf("%s, %d partitions in %d buckets: %d strong pairs, %d clusters, %d groups; one detection %d, %d, %d", s.Name, c.partitions, c.buckets,
					st.StrongPairs, st.Clusters, st.Groups, wst.StrongPairs, wst.Clusters, wst.Groups)
			}
			if a, b := flaggedOf(got), flaggedOf(whole); !slices.Equal(a, b) {
				t.Errorf("%s, %d partitions in %d buckets: shares flag %d accounts, one detection %d", s.Name, c.partitions, c.buckets, len(a), len(b))
			}
			for i := range got {
				if i < len(whole) && !slices.Equal(got[i].Members, whole[i].Members) {
					t.Errorf("%s: group %d differs", s.Name, i)
				}
			}
			if len(got) != len(whole) {
				t.Errorf("%s: %d groups, one detection %d", s.Name, len(got), len(whole))
			}
			bucket := 0
			for b := range c.buckets {
				lo, hi := moderation.BucketPartitions(b, c.buckets, c.partitions)
				n := 0
				for _, pt := range parts[lo:hi] {
					n += len(pt.Candidates)
				}
				bucket = max(bucket, n)
			}
			if largest > 2*bucket {
				t.Errorf("%s: a share held %d candidates, more than two buckets' %d", s.Name, largest, 2*bucket)
			}
		}
	}
}

// An account counts towards an item pair only with MinItems eligible
// reactions in the whole step, wherever they lie: a share that sees only two
// of them hands the pair on, and the last stage counts the account's
// reactions over every partition before it decides.
func TestMergeSharesCountAnAccountsReactionsInEveryBucket(t *testing.T) {
	p := moderation.DefaultParams
	const partitions = 64
	// Three items in three different partitions, hence buckets.
	var items []string
	seen := map[int]bool{}
	for i := 0; len(items) < 3; i++ {
		name := fmt.Sprint("item", i)
		if k := moderation.PartOf(name) * partitions / moderation.Parts; !seen[k] {
			seen[k] = true
			items = append(items, name)
		}
	}
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	for _, c := range []struct {
		name      string
		withThird int // accounts that react to all three items
		twoOnly   int // accounts that react to the first two only
		strong    int
	}{
		{"19 accounts with three items and one with two: no strong pair", 19, 1, 0},
		{"20 accounts with three items: three strong pairs", 20, 1, 3},
	} {
		var rs []moderation.Reaction
		for u := range c.withThird {
			for i, it := range items {
				rs = append(rs, moderation.Reaction{UserID: fmt.Sprint("three", u), ContentID: it, Reaction: "like", At: at(i)})
			}
		}
		for u := range c.twoOnly {
			for i, it := range items[:2] {
				rs = append(rs, moderation.Reaction{UserID: fmt.Sprint("two", u), ContentID: it, Reaction: "like", At: at(i)})
			}
		}
		// The third item's twentieth account, and 400 others elsewhere.
		rs = append(rs, moderation.Reaction{UserID: "other", ContentID: items[2], Reaction: "like", At: at(30)})
		for u := range 400 {
			rs = append(rs, moderation.Reaction{UserID: fmt.Sprint("filler", u), ContentID: fmt.Sprint("filler", u), Reaction: "like", At: at(u % 60)})
		}
		_, whole, err := p.Detect(rs, func([]string) (map[string]time.Time, error) { return nil, nil })
		if err != nil {
			t.Fatal(err)
		}
		parts, _ := moderationtest.Partitioned(p, rs, partitions, t0, t0.Add(time.Hour))
		_, st, _, err := moderationtest.MergedInShares(p, parts, partitions, func([]string) (map[string]time.Time, error) { return nil, nil })
		if err != nil {
			t.Fatal(err)
		}
		if whole.StrongPairs != c.strong || st.StrongPairs != c.strong {
			t.Errorf("%s: one detection %d strong pairs, shares %d", c.name, whole.StrongPairs, st.StrongPairs)
		}
	}
}
