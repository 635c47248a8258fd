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
