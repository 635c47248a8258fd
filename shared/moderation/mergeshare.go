package moderation

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/videngage/engagement/shared/views"
)

// The merge of a step is itself cut into shares so that no invocation holds
// every candidate. The partitions are grouped into B buckets of items; share
// (i, j), i ≤ j, holds the candidates of buckets i and j and counts the item
// pairs with one item in each (both in i when i = j): a pair's count depends
// only on the reactions on its two items, all of which lie in one partition
// each, so every pair is counted exactly, by one share (MergeShare). The
// last stage (MergeGroups) joins the strong pairs into clusters and finds
// the groups on each cluster from the reactions on the cluster's items
// alone, which is all Detect looks at there. One thing a share cannot see
// is how many eligible reactions an account has outside its two buckets
// (Detect counts an account's pairs only when it has MinItems): a pair that
// is strong only with such accounts is handed on with them, and the last
// stage counts their reactions over every partition before it decides.

// MergeShares is how many shares a merge over buckets buckets has.
func MergeShares(buckets int) int { return buckets * (buckets + 1) / 2 }

// ShareBuckets are the buckets i ≤ j whose candidates share s of
// MergeShares(buckets) holds.
func ShareBuckets(s, buckets int) (i, j int) {
	for i = range buckets {
		if s < buckets-i {
			return i, i + s
		}
		s -= buckets - i
	}
	panic(fmt.Sprintf("moderation: share out of range for %d buckets", buckets))
}

// BucketPartitions are the partitions [lo, hi) of bucket b of buckets, of
// partitions.
func BucketPartitions(b, buckets, partitions int) (lo, hi int) {
	return b * partitions / buckets, (b + 1) * partitions / buckets
}

// ItemPair is two items, in order.
type ItemPair [2]Item

// PairShare is what one share of a merge found: the strong item pairs it
// counted, and those that are strong only if enough of Accounts have
// MinItems eligible reactions in all (counting those in the share).
type PairShare struct {
	Strong []ItemPair
	Maybe  []MaybePair
	// Candidates is how many reactions the share held.
	Candidates int
	// Skipped: the share held more candidates than its invocation may
	// (the job's budget) and counted nothing.
	Skipped bool
}

// MaybePair is an item pair that Sure accounts with MinItems eligible
// reactions in the share reacted to within Window, and Accounts with fewer;
// Reach is the accounts that reacted to each of its items.
type MaybePair struct {
	Pair     ItemPair
	Reach    [2]int
	Sure     int
	Accounts []string
}

// StepAccounts is a step's account count, from the union of its
// partitions' sketches.
func StepAccounts(parts []Partial) (int, error) {
	all := views.NewViewers()
	for _, pt := range parts {
		if err := all.MergeBytes(pt.Accounts); err != nil {
			return 0, fmt.Errorf("moderation: accounts: %w", err)
		}
	}
	return int(all.Estimate()), nil
}

// MergeShare is share (i, j) of a step's merge: a holds the partitions'
// shares of bucket i, b those of bucket j (nil when i = j), accounts is the
// step's account count (StepAccounts).
func (p Params) MergeShare(a, b []Partial, accounts int) (PairShare, error) {
	if err := p.Validate(); err != nil {
		return PairShare{}, err
	}
	n := 0
	for _, pt := range slices.Concat(a, b) {
		n += len(pt.Candidates)
	}
	rs := make([]Reaction, 0, n)
	for _, pt := range a {
		rs = append(rs, pt.Candidates...)
	}
	fromB := map[token]bool{}
	for _, pt := range b {
		rs = append(rs, pt.Candidates...)
		for _, r := range pt.Candidates {
			fromB[token{r.ContentID, r.Reaction}] = true
		}
	}
	out := PairShare{Candidates: n}
	if accounts == 0 {
		return out, nil
	}
	d := newDetection(p, rs)
	d.stats.Accounts = accounts
	inB := make([]bool, len(d.toks))
	for t, k := range d.toks {
		inB[t] = fromB[k]
	}
	// Only the pairs across the two buckets are this share's, or every pair
	// when they are one bucket.
	owned := func(x, y int32) bool { return b == nil || inB[x] != inB[y] }
	sure := map[uint64]int32{}
	maybe := map[uint64][]int32{}
	d.eachPair(d.eligible(), func(u int32, reactions int, x, y int32) {
		if !owned(x, y) {
			return
		}
		k := pairKey(x, y)
		if reactions >= p.MinItems {
			sure[k]++
		} else {
			maybe[k] = append(maybe[k], u)
		}
	})
	pairOf := func(k uint64) (int32, int32, ItemPair) {
		x, y := int32(k>>32), int32(k&0xffffffff)
		return x, y, itemPair(d.toks[x], d.toks[y])
	}
	for k, c := range sure {
		if x, y, pr := pairOf(k); d.strong(int(c), x, y) {
			out.Strong = append(out.Strong, pr)
		}
	}
	for k, us := range maybe {
		x, y, pr := pairOf(k)
		c := int(sure[k])
		if d.strong(c, x, y) || !d.strong(c+len(us), x, y) {
			continue
		}
		m := MaybePair{Pair: pr, Sure: c, Reach: [2]int{int(d.reach[x]), int(d.reach[y])}}
		if pr[0] != itemOf(d.toks[x]) {
			m.Reach[0], m.Reach[1] = m.Reach[1], m.Reach[0]
		}
		for _, u := range us {
			m.Accounts = append(m.Accounts, d.users[u])
		}
		slices.Sort(m.Accounts)
		out.Maybe = append(out.Maybe, m)
	}
	slices.SortFunc(out.Strong, compareItemPairs)
	slices.SortFunc(out.Maybe, func(a, b MaybePair) int { return compareItemPairs(a.Pair, b.Pair) })
	return out, nil
}

func itemOf(t token) Item { return Item{ContentID: t.content, Reaction: t.kind} }

func itemPair(a, b token) ItemPair {
	x, y := itemOf(a), itemOf(b)
	if compareItems(y, x) < 0 {
		x, y = y, x
	}
	return ItemPair{x, y}
}

func compareItems(a, b Item) int {
	return cmp.Or(cmp.Compare(a.ContentID, b.ContentID), cmp.Compare(a.Reaction, b.Reaction))
}

func compareItemPairs(a, b ItemPair) int {
	return cmp.Or(compareItems(a[0], b[0]), compareItems(a[1], b[1]))
}

// Partials visits a step's partitions' shares one at a time; visit's error
// stops it.
type Partials func(visit func(Partial) error) error

// MergeGroups is the last stage of a step's merge: from every share's
// pairs, the clusters and the groups to flag, as Detect over the step
// would find them. It reads the partitions' shares (each) at most twice, a
// partition at a time, keeping only the reactions of the accounts a pair
// waits on and those on the clusters' items.
func (p Params) MergeGroups(shares []PairShare, accounts int, each Partials, firstSeen FirstSeen) ([]Group, Stats, error) {
	if err := p.Validate(); err != nil {
		return nil, Stats{}, err
	}
	strong := map[ItemPair]bool{}
	waiting := map[string]int{} // eligible reactions of the accounts a pair waits on
	for _, s := range shares {
		for _, pr := range s.Strong {
			strong[pr] = true
		}
		for _, m := range s.Maybe {
			for _, u := range m.Accounts {
				waiting[u] = 0
			}
		}
	}
	if len(waiting) > 0 {
		err := each(func(pt Partial) error {
			d := newDetection(p, pt.Candidates)
			d.stats.Accounts = accounts
			eligible := d.eligible()
			for u, evs := range d.events {
				if _, ok := waiting[d.users[u]]; !ok {
					continue
				}
				for _, e := range evs {
					if eligible[e.tok] {
						waiting[d.users[u]]++
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, Stats{}, err
		}
		for _, s := range shares {
			for _, m := range s.Maybe {
				c := m.Sure
				for _, u := range m.Accounts {
					if waiting[u] >= p.MinItems {
						c++
					}
				}
				if c >= p.MinGroup && float64(c)*float64(accounts) >= p.MinLift*float64(m.Reach[0])*float64(m.Reach[1]) {
					strong[m.Pair] = true
				}
			}
		}
	}
	st := Stats{Accounts: accounts, StrongPairs: len(strong)}
	// The clusters, over the items of the strong pairs.
	index := map[Item]int32{}
	var items []Item
	intern := func(it Item) int32 {
		i, ok := index[it]
		if !ok {
			i = int32(len(items))
			index[it] = i
			items = append(items, it)
		}
		return i
	}
	pairs := make([][2]int32, 0, len(strong))
	for _, pr := range slices.SortedFunc(maps.Keys(strong), compareItemPairs) {
		pairs = append(pairs, [2]int32{intern(pr[0]), intern(pr[1])})
	}
	clusters := components(len(items), pairs, p.MinItems)
	st.Clusters = len(clusters)
	if len(clusters) == 0 {
		return nil, st, nil
	}
	onCluster := map[token]bool{}
	for _, c := range clusters {
		for _, i := range c {
			onCluster[token{items[i].ContentID, items[i].Reaction}] = true
		}
	}
	var rs []Reaction
	err := each(func(pt Partial) error {
		for _, r := range pt.Candidates {
			if onCluster[token{r.ContentID, r.Reaction}] {
				rs = append(rs, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, st, err
	}
	d := newDetection(p, rs)
	d.stats = st
	tokIdx := make(map[token]int32, len(d.toks))
	for t, k := range d.toks {
		tokIdx[k] = int32(t)
	}
	local := make([][]int32, len(clusters))
	for i, c := range clusters {
		for _, t := range c {
			local[i] = append(local[i], tokIdx[token{items[t].ContentID, items[t].Reaction}])
		}
	}
	groups, err := d.flag(local, firstSeen)
	return groups, d.stats, err
}
