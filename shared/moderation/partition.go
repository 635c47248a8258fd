package moderation

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"time"

	"github.com/videngage/engagement/shared/views"
)

// The detection of one step is partitioned by item: a partition scans the
// reactions of its items only (Scan) and keeps those of the items a group
// could act on; the merge (Merge) runs Detect over what every partition
// kept, with the step's account count from their sketches. Every signal of
// Detect but the account count is a function of the reactions on items that
// MinGroup to MaxItemShare·N accounts reacted to (the eligible items), and
// all of an item's reactions lie in one partition, so the merge finds what
// one Detect over the whole step would, as long as no item between
// MaxItemReach and MaxItemShare·N accounts is left out (see
// docs/design/manipulation.md).

// Parts is how many parts the items are spread over (the Reactions.ItemPart
// column, 100_detection.sql): a partition of the detection is a range of
// parts, so the number of partitions can change between steps.
const Parts = 4096

// PartRange is the parts [lo, hi) of partition i of n.
func PartRange(i, n int) (lo, hi int) { return i * Parts / n, (i + 1) * Parts / n }

// PartOf is an item's part in memory (the benchmark's generated steps); the
// store's ItemPart is Spanner's own hash, and only the grouping matters.
func PartOf(contentID string) int {
	h := fnv.New32a()
	h.Write([]byte(contentID))
	return int(h.Sum32() % Parts)
}

// Partial is what one partition of a step hands to the merge.
type Partial struct {
	// Candidates are the partition's reactions on items that at least
	// MinGroup and at most MaxItemReach accounts reacted to.
	Candidates []Reaction
	// Accounts is a sketch of the partition's accounts (views.Viewers'
	// encoding): the merge counts the step's accounts from the union.
	Accounts []byte
	// Rows counts the reactions scanned, Popular the items left out over
	// MaxItemReach.
	Rows, Popular int
	// Kept is how many candidates the partition kept: a share read without
	// its candidates (the store's heads) still says how many a merge share
	// will hold.
	Kept int
}

// Spike is an item whose reactions in one minute rose at least SpikeFactor
// times over its own rate before: flagged for a moderator's review, with
// nothing done to its counts.
type Spike struct {
	Item Item
	// Minute is the minute of the spike, [Minute, Minute+1m).
	Minute time.Time
	// Reactions is how many accounts reacted in that minute.
	Reactions int
	// Baseline is the item's rate over [Minute-SpikeBaseline, Minute),
	// reactions a minute.
	Baseline float64
}

// Evidence is the spike's record in the audit trail.
func (s Spike) Evidence(baseline time.Duration) Evidence {
	return Evidence{
		Items:       []Item{s.Item},
		WindowStart: s.Minute, WindowEnd: s.Minute.Add(time.Minute),
		GroupSize:         s.Reactions,
		PerMinute:         float64(s.Reactions),
		BaselinePerMinute: &s.Baseline,
		BaselineStart:     s.Minute.Add(-baseline),
	}
}

// Scan is one partition's pass over a step's reactions, fed a part at a
// time: Add each reaction of the part, then EndPart. Its memory is the
// part being read plus the candidates kept: an item past MaxItemReach
// accounts keeps only its count.
type Scan struct {
	p        Params
	from, to int64 // the step's new reactions, for spikes: [from, to)
	items    map[token]*itemScan
	accounts *views.Viewers
	out      Partial
	spikes   []Spike
}

type itemScan struct {
	rows    []Reaction
	n       int
	minutes map[int64]int32 // reactions per minute (unix minute)
}

// NewScan starts the scan of a step whose new reactions lie in [from, to)
// (those read before from, up to 2·Window, are context).
func (p Params) NewScan(from, to time.Time) *Scan {
	return &Scan{p: p, from: from.UnixNano(), to: to.UnixNano(), items: map[token]*itemScan{}, accounts: views.NewViewers()}
}

// Add takes one reaction of the part being read (the store holds one row
// per account and item).
func (s *Scan) Add(r Reaction) {
	s.out.Rows++
	s.accounts.Add(AccountHash(r.UserID))
	k := token{r.ContentID, r.Reaction}
	it := s.items[k]
	if it == nil {
		it = &itemScan{}
		s.items[k] = it
	}
	it.n++
	if s.p.MaxItemReach == 0 || it.n <= s.p.MaxItemReach {
		it.rows = append(it.rows, r)
	} else {
		it.rows = nil
	}
	if s.p.SpikeFactor > 0 {
		if it.minutes == nil {
			it.minutes = map[int64]int32{}
		}
		it.minutes[r.At.Unix()/60]++
	}
}

// EndPart closes the part read since the last EndPart: its items' kept
// reactions join the candidates, and its spikes are judged.
func (s *Scan) EndPart() {
	for k, it := range s.items {
		switch {
		case s.p.MaxItemReach > 0 && it.n > s.p.MaxItemReach:
			s.out.Popular++
		case it.n >= s.p.MinGroup:
			s.out.Candidates = append(s.out.Candidates, it.rows...)
		}
		if sp, ok := s.spike(k, it); ok {
			s.spikes = append(s.spikes, sp)
		}
	}
	clear(s.items)
}

// spike finds the item's steepest minute among the step's new ones, if it
// is SpikeFactor over the item's baseline.
func (s *Scan) spike(k token, it *itemScan) (Spike, bool) {
	if s.p.SpikeFactor <= 0 || float64(it.n) < s.p.SpikeFactor*s.p.SpikeMinBaseline {
		return Spike{}, false
	}
	base := int64(s.p.SpikeBaseline / time.Minute)
	var best Spike
	bestRatio := 0.0
	for m, c := range it.minutes {
		if m*60*1e9 < s.from || m*60*1e9 >= s.to {
			continue
		}
		before := 0
		for b := m - base; b < m; b++ {
			before += int(it.minutes[b])
		}
		rate := float64(before) / float64(base)
		ratio := float64(c) / math.Max(rate, s.p.SpikeMinBaseline)
		if ratio >= s.p.SpikeFactor && ratio > bestRatio {
			bestRatio = ratio
			best = Spike{Item: Item{ContentID: k.content, Reaction: k.kind}, Minute: time.Unix(m*60, 0).UTC(), Reactions: int(c), Baseline: rate}
		}
	}
	return best, bestRatio > 0
}

// Finish returns the partition's share of the step and its spikes (by
// item).
func (s *Scan) Finish() (Partial, []Spike) {
	s.EndPart()
	s.out.Accounts = s.accounts.Bytes()
	s.out.Kept = len(s.out.Candidates)
	slices.SortFunc(s.spikes, func(a, b Spike) int {
		return cmp.Or(cmp.Compare(a.Item.ContentID, b.Item.ContentID), cmp.Compare(a.Item.Reaction, b.Item.Reaction))
	})
	return s.out, s.spikes
}

// AccountHash is an account's hash in the sketches of accounts.
func AccountHash(userID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(userID))
	return h.Sum64()
}

// Merge finds the coordinated groups of a step from its partitions' shares:
// Detect over their candidates, the step's accounts counted from the
// union of their sketches.
func (p Params) Merge(parts []Partial, firstSeen FirstSeen) ([]Group, Stats, error) {
	accounts, err := StepAccounts(parts)
	if err != nil {
		return nil, Stats{}, err
	}
	n, rows, popular := 0, 0, 0
	for _, pt := range parts {
		n += len(pt.Candidates)
		rows += pt.Rows
		popular += pt.Popular
	}
	candidates := make([]Reaction, 0, n)
	for _, pt := range parts {
		candidates = append(candidates, pt.Candidates...)
	}
	if accounts == 0 {
		return nil, Stats{}, nil
	}
	groups, st, err := p.detect(candidates, accounts, firstSeen)
	st.Reactions, st.Popular = rows, popular
	return groups, st, err
}
