package moderation

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// Reaction is one account's current reaction on an item, as of its last
// change (At).
type Reaction struct {
	UserID    string
	ContentID string
	Reaction  string // like or dislike
	At        time.Time
}

// Params tune the detection; DefaultParams are the production settings.
type Params struct {
	// Window is how close in time reactions must be to count as acting
	// together: one account's two reactions for an item pair, and two
	// accounts' reactions on a shared item.
	Window time.Duration
	// MinItems is the overlap that links two accounts: at least this many
	// items reacted to alike, each within Window of the other account.
	MinItems int
	// MinGroup is the smallest group flagged; every member must be linked to
	// at least MinGroup-1 others of its group.
	MinGroup int
	// MinLift: an item pair is a group's signal only when at least MinGroup
	// accounts reacted to both within Window and that is at least MinLift
	// times what independent accounts would give (n_a·n_b/N).
	MinLift float64
	// MaxItemShare: items that more than this share of the scan's accounts
	// reacted to are popular, not a group's target, and are left out.
	MaxItemShare float64
	// YoungAge: an account first seen less than this before a group's
	// window ends is young.
	YoungAge time.Duration
	// MinYoungShare: a group is flagged when at least this share of its
	// members are young; otherwise only on EstablishedMinItems.
	MinYoungShare float64
	// EstablishedMinItems is the overlap that links established accounts
	// (a group of mostly established accounts needs this many items).
	EstablishedMinItems int
	// MaxCandidates bounds the accounts compared pairwise in one cluster of
	// items (memory MaxCandidates²/8 bytes); a larger cluster is skipped
	// and reported.
	MaxCandidates int
	// MaxItemReach: an item reacted to by more accounts than this in one
	// scan is popular whatever the scan's size, and is left out by the
	// partitions (Scan) before the merge; 0 leaves it to MaxItemShare.
	MaxItemReach int
	// SpikeFactor: an item whose reactions in one minute reach this many
	// times its rate over the SpikeBaseline before is flagged for review
	// (Scan); 0 turns the check off.
	SpikeFactor float64
	// SpikeBaseline is how far back an item's own rate is taken.
	SpikeBaseline time.Duration
	// SpikeMinBaseline is the lowest baseline a spike is measured against
	// (reactions a minute): an item with no reactions before is not rising
	// a thousandfold from nothing with its first few.
	SpikeMinBaseline float64
}

// DefaultParams are the production settings.
var DefaultParams = Params{
	Window:              15 * time.Minute,
	MinItems:            3,
	MinGroup:            20,
	MinLift:             10,
	MaxItemShare:        0.2,
	YoungAge:            30 * 24 * time.Hour,
	MinYoungShare:       0.5,
	EstablishedMinItems: 6,
	MaxCandidates:       10000,
	MaxItemReach:        10000,
	SpikeFactor:         1000,
	SpikeBaseline:       30 * time.Minute,
	SpikeMinBaseline:    0.1,
}

// Validate reports settings that cannot work.
func (p Params) Validate() error {
	switch {
	case p.Window <= 0:
		return fmt.Errorf("moderation: Window must be positive")
	case p.MinItems < 2:
		return fmt.Errorf("moderation: MinItems must be at least 2")
	case p.MinGroup < 2:
		return fmt.Errorf("moderation: MinGroup must be at least 2")
	case p.MinLift < 1:
		return fmt.Errorf("moderation: MinLift must be at least 1")
	case p.MaxItemShare <= 0 || p.MaxItemShare > 1:
		return fmt.Errorf("moderation: MaxItemShare must be in (0, 1]")
	case p.EstablishedMinItems < p.MinItems:
		return fmt.Errorf("moderation: EstablishedMinItems must be at least MinItems")
	case p.MinYoungShare < 0 || p.MinYoungShare > 1:
		return fmt.Errorf("moderation: MinYoungShare must be in [0, 1]")
	case p.MaxCandidates < p.MinGroup:
		return fmt.Errorf("moderation: MaxCandidates must be at least MinGroup")
	case p.MaxItemReach != 0 && p.MaxItemReach < p.MinGroup:
		return fmt.Errorf("moderation: MaxItemReach must be 0 or at least MinGroup")
	case p.SpikeFactor != 0 && (p.SpikeFactor < 1 || p.SpikeBaseline < time.Minute || p.SpikeMinBaseline <= 0):
		return fmt.Errorf("moderation: a spike check needs SpikeFactor ≥ 1, SpikeBaseline ≥ 1m and SpikeMinBaseline > 0")
	}
	return nil
}

// Group is a coordinated group: its members (sorted) and the evidence.
type Group struct {
	Members  []string
	Evidence Evidence
}

// FirstSeen answers when each of users was first seen; a user it leaves out
// counts as established.
type FirstSeen func(users []string) (map[string]time.Time, error)

// Stats describe one detection, for logs and the benchmark.
type Stats struct {
	Reactions   int `json:"reactions"`
	Accounts    int `json:"accounts"`
	Items       int `json:"items"`       // distinct (content, reaction) pairs
	Eligible    int `json:"eligible"`    // of them, reacted to by MinGroup..MaxItemShare·Accounts accounts
	StrongPairs int `json:"strongPairs"` // item pairs passing MinGroup and MinLift
	Clusters    int `json:"clusters"`    // clusters of at least MinItems items
	Skipped     int `json:"skipped"`     // clusters over MaxCandidates accounts
	Candidates  int `json:"candidates"`  // accounts compared pairwise
	Groups      int `json:"groups"`      // groups found
	Established int `json:"established"` // of them, not flagged: established accounts without EstablishedMinItems
	Flagged     int `json:"flagged"`     // accounts in the groups returned
	Popular     int `json:"popular"`     // items left out by the partitions over MaxItemReach
}

type token struct{ content, kind string }

type event struct {
	tok int32
	at  int64 // unix nanoseconds
}

// Detect finds the coordinated groups among rs, the reactions that changed
// in one scanned range. It returns the groups to flag, sorted by their first
// member.
func (p Params) Detect(rs []Reaction, firstSeen FirstSeen) ([]Group, Stats, error) {
	return p.detect(rs, 0, firstSeen)
}

// detect is Detect over rs with the scan's account count taken as accounts
// (0: the accounts of rs).
func (p Params) detect(rs []Reaction, accounts int, firstSeen FirstSeen) ([]Group, Stats, error) {
	if err := p.Validate(); err != nil {
		return nil, Stats{}, err
	}
	d := newDetection(p, rs)
	if accounts > 0 {
		d.stats.Accounts = accounts
	}
	clusters := d.clusters()
	out, err := d.flag(clusters, firstSeen)
	return out, d.stats, err
}

// flag finds the groups on each cluster, asks firstSeen the members' ages
// and returns the groups to flag, sorted by their first member.
func (d *detection) flag(clusters [][]int32, firstSeen FirstSeen) ([]Group, error) {
	p, st := d.p, &d.stats
	type found struct {
		cluster []int32
		members []int32
	}
	var all []found
	for _, c := range clusters {
		groups, ok := d.groupsOf(c, nil, p.MinItems)
		if !ok {
			st.Skipped++
			continue
		}
		for _, g := range groups {
			all = append(all, found{c, g})
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	var ask []string
	seen := map[int32]bool{}
	for _, f := range all {
		for _, u := range f.members {
			if !seen[u] {
				seen[u] = true
				ask = append(ask, d.users[u])
			}
		}
	}
	slices.Sort(ask)
	firsts, err := firstSeen(ask)
	if err != nil {
		return nil, fmt.Errorf("moderation: first seen: %w", err)
	}
	var out []Group
	for _, f := range all {
		st.Groups++
		g := d.evidence(f.cluster, f.members, firsts)
		if float64(g.Evidence.YoungAccounts) >= p.MinYoungShare*float64(len(f.members)) {
			out = append(out, g)
			continue
		}
		// Mostly established accounts: only a stronger overlap counts.
		strict, _ := d.groupsOf(f.cluster, f.members, p.EstablishedMinItems)
		if len(strict) == 0 {
			st.Established++
		}
		for _, s := range strict {
			out = append(out, d.evidence(f.cluster, s, firsts))
		}
	}
	slices.SortFunc(out, func(a, b Group) int { return cmp.Compare(a.Members[0], b.Members[0]) })
	for _, g := range out {
		st.Flagged += len(g.Members)
	}
	return out, nil
}

type detection struct {
	p      Params
	users  []string
	toks   []token
	events [][]event // per user, by time
	reach  []int32   // accounts per token
	stats  Stats
}

func newDetection(p Params, rs []Reaction) *detection {
	d := &detection{p: p}
	userIdx := map[string]int32{}
	tokIdx := map[token]int32{}
	for _, r := range rs {
		u, ok := userIdx[r.UserID]
		if !ok {
			u = int32(len(d.users))
			userIdx[r.UserID] = u
			d.users = append(d.users, r.UserID)
			d.events = append(d.events, nil)
		}
		k := token{r.ContentID, r.Reaction}
		t, ok := tokIdx[k]
		if !ok {
			t = int32(len(d.toks))
			tokIdx[k] = t
			d.toks = append(d.toks, k)
			d.reach = append(d.reach, 0)
		}
		d.events[u] = append(d.events[u], event{t, r.At.UnixNano()})
	}
	// An account's reactions on one item count once, at the latest.
	for u, evs := range d.events {
		slices.SortFunc(evs, func(a, b event) int { return cmp.Or(cmp.Compare(a.tok, b.tok), cmp.Compare(b.at, a.at)) })
		evs = slices.CompactFunc(evs, func(a, b event) bool { return a.tok == b.tok })
		for _, e := range evs {
			d.reach[e.tok]++
		}
		slices.SortFunc(evs, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.tok, b.tok)) })
		d.events[u] = slices.Clip(evs)
	}
	d.stats.Reactions = len(rs)
	d.stats.Accounts = len(d.users)
	d.stats.Items = len(d.toks)
	return d
}

// clusters are the connected sets of at least MinItems items linked by
// strong pairs: item pairs that at least MinGroup accounts reacted to within
// Window, MinLift times more than independent accounts would.
func (d *detection) clusters() [][]int32 {
	eligible := d.eligible()
	if d.stats.Eligible < d.p.MinItems {
		return nil
	}
	pairs := map[uint64]int32{}
	d.eachPair(eligible, func(_ int32, n int, a, b int32) {
		if n >= d.p.MinItems {
			pairs[pairKey(a, b)]++
		}
	})
	var strong [][2]int32
	for k, c := range pairs {
		a, b := int32(k>>32), int32(k&0xffffffff)
		if d.strong(int(c), a, b) {
			strong = append(strong, [2]int32{a, b})
		}
	}
	d.stats.StrongPairs = len(strong)
	out := components(len(d.toks), strong, d.p.MinItems)
	d.stats.Clusters = len(out)
	return out
}

// eligible marks the items that MinGroup to MaxItemShare·Accounts accounts
// reacted to: the only ones a group's signal is looked for on.
func (d *detection) eligible() []bool {
	p := d.p
	n := float64(d.stats.Accounts)
	eligible := make([]bool, len(d.toks))
	d.stats.Eligible = 0
	for t, r := range d.reach {
		eligible[t] = int(r) >= p.MinGroup && float64(r) <= p.MaxItemShare*n
		if eligible[t] {
			d.stats.Eligible++
		}
	}
	return eligible
}

// eachPair calls f for every pair of eligible items one account reacted to
// within Window of each other, n being the account's eligible reactions.
func (d *detection) eachPair(eligible []bool, f func(user int32, n int, a, b int32)) {
	window := d.p.Window.Nanoseconds()
	var evs []event
	for u, all := range d.events {
		evs = evs[:0]
		for _, e := range all {
			if eligible[e.tok] {
				evs = append(evs, e)
			}
		}
		if len(evs) < 2 {
			continue
		}
		for i, a := range evs {
			for _, b := range evs[i+1:] {
				if b.at-a.at > window {
					break
				}
				f(int32(u), len(evs), a.tok, b.tok)
			}
		}
	}
}

// strong reports whether c accounts reacting to both a and b make a strong
// pair: at least MinGroup, and MinLift times what independent accounts
// would give.
func (d *detection) strong(c int, a, b int32) bool {
	return c >= d.p.MinGroup && float64(c)*float64(d.stats.Accounts) >= d.p.MinLift*float64(d.reach[a])*float64(d.reach[b])
}

// components are the connected sets, of at least least items, of the
// items 0..n-1 linked by pairs, each sorted, in the order of their first item.
func components(n int, pairs [][2]int32, least int) [][]int32 {
	parent := make([]int32, n)
	for i := range parent {
		parent[i] = int32(i)
	}
	find := func(x int32) int32 {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	inPair := make([]bool, n)
	for _, pr := range pairs {
		a, b := pr[0], pr[1]
		inPair[a], inPair[b] = true, true
		if ra, rb := find(a), find(b); ra != rb {
			parent[max(ra, rb)] = min(ra, rb)
		}
	}
	byRoot := map[int32][]int32{}
	for t := range n {
		if inPair[t] {
			r := find(int32(t))
			byRoot[r] = append(byRoot[r], int32(t))
		}
	}
	var out [][]int32
	for _, c := range byRoot {
		if len(c) >= least {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b []int32) int { return cmp.Compare(a[0], b[0]) })
	return out
}

func pairKey(a, b int32) uint64 {
	if a > b {
		a, b = b, a
	}
	return uint64(a)<<32 | uint64(b)
}

// groupsOf returns the groups among the accounts (of within, or all when
// within is nil) that reacted to at least k items of cluster: two accounts
// are linked when they share k items, each pair of their reactions on a
// shared item within Window; a group is a connected set of at least
// MinGroup accounts each linked to at least MinGroup-1 others (the
// (MinGroup-1)-core). ok is false when the cluster has more than
// MaxCandidates candidates.
func (d *detection) groupsOf(cluster, within []int32, k int) (groups [][]int32, ok bool) {
	p := d.p
	local := make(map[int32]int, len(cluster))
	for i, t := range cluster {
		local[t] = i
	}
	words := (len(cluster) + 63) / 64
	type cand struct {
		user int32
		has  []uint64
		at   []int64
	}
	var cands []cand
	consider := func(u int32) {
		var c *cand
		n := 0
		for _, e := range d.events[u] {
			i, in := local[e.tok]
			if !in {
				continue
			}
			if c == nil {
				c = &cand{user: u, has: make([]uint64, words), at: make([]int64, len(cluster))}
			}
			c.has[i/64] |= 1 << (i % 64)
			c.at[i] = e.at
			n++
		}
		if n >= k {
			cands = append(cands, *c)
		}
	}
	if within != nil {
		for _, u := range within {
			consider(u)
		}
	} else {
		for u := range d.events {
			consider(int32(u))
		}
	}
	if len(cands) > p.MaxCandidates {
		return nil, false
	}
	d.stats.Candidates += len(cands)
	m := len(cands)
	if m < p.MinGroup {
		return nil, true
	}
	window := p.Window.Nanoseconds()
	adjWords := (m + 63) / 64
	adj := make([][]uint64, m)
	for i := range adj {
		adj[i] = make([]uint64, adjWords)
	}
	deg := make([]int, m)
	for i := range m {
		for j := i + 1; j < m; j++ {
			shared := 0
			for w := range words {
				shared += bits.OnesCount64(cands[i].has[w] & cands[j].has[w])
			}
			if shared < k {
				continue
			}
			close := 0
			for w := range words {
				both := cands[i].has[w] & cands[j].has[w]
				for both != 0 {
					b := w*64 + bits.TrailingZeros64(both)
					both &= both - 1
					if dt := cands[i].at[b] - cands[j].at[b]; dt <= window && -dt <= window {
						close++
					}
				}
			}
			if close >= k {
				adj[i][j/64] |= 1 << (j % 64)
				adj[j][i/64] |= 1 << (i % 64)
				deg[i]++
				deg[j]++
			}
		}
	}
	// Peel the accounts linked to fewer than MinGroup-1 others until none is.
	alive := make([]bool, m)
	var queue []int
	for i := range m {
		alive[i] = true
		if deg[i] < p.MinGroup-1 {
			alive[i] = false
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		forEach(adj[x], func(y int) {
			if alive[y] {
				deg[y]--
				if deg[y] < p.MinGroup-1 {
					alive[y] = false
					queue = append(queue, y)
				}
			}
		})
	}
	// Connected sets of what is left.
	done := make([]bool, m)
	for s := range m {
		if !alive[s] || done[s] {
			continue
		}
		var g []int32
		stack := []int{s}
		done[s] = true
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			g = append(g, cands[x].user)
			forEach(adj[x], func(y int) {
				if alive[y] && !done[y] {
					done[y] = true
					stack = append(stack, y)
				}
			})
		}
		if len(g) >= p.MinGroup {
			slices.Sort(g)
			groups = append(groups, g)
		}
	}
	return groups, true
}

func forEach(set []uint64, f func(int)) {
	for w, word := range set {
		for word != 0 {
			f(w*64 + bits.TrailingZeros64(word))
			word &= word - 1
		}
	}
}

// evidence builds the group of members on cluster: the items at least half
// of them reacted to, the window of their reactions on those items, the
// group's size and its young accounts.
func (d *detection) evidence(cluster, members []int32, firsts map[string]time.Time) Group {
	in := make(map[int32]bool, len(cluster))
	for _, t := range cluster {
		in[t] = true
	}
	count := map[int32]int{}
	for _, u := range members {
		for _, e := range d.events[u] {
			if in[e.tok] {
				count[e.tok]++
			}
		}
	}
	var items []int32
	for t, n := range count {
		if 2*n >= len(members) {
			items = append(items, t)
		}
	}
	slices.SortFunc(items, func(a, b int32) int {
		return cmp.Or(cmp.Compare(count[b], count[a]), cmp.Compare(d.toks[a].content, d.toks[b].content), cmp.Compare(d.toks[a].kind, d.toks[b].kind))
	})
	if len(items) > MaxEvidenceItems {
		items = items[:MaxEvidenceItems]
	}
	named := make(map[int32]bool, len(items))
	ev := Evidence{GroupSize: len(members)}
	for _, t := range items {
		named[t] = true
		ev.Items = append(ev.Items, Item{ContentID: d.toks[t].content, Reaction: d.toks[t].kind})
	}
	var lo, hi int64
	first := true
	for _, u := range members {
		for _, e := range d.events[u] {
			if !named[e.tok] {
				continue
			}
			if first || e.at < lo {
				lo = e.at
			}
			if first || e.at > hi {
				hi = e.at
			}
			first = false
		}
	}
	ev.WindowStart, ev.WindowEnd = time.Unix(0, lo).UTC(), time.Unix(0, hi).UTC()
	names := make([]string, len(members))
	for i, u := range members {
		names[i] = d.users[u]
		if f, ok := firsts[names[i]]; ok && ev.WindowEnd.Sub(f) < d.p.YoungAge {
			ev.YoungAccounts++
		}
	}
	slices.Sort(names)
	return Group{Members: names, Evidence: ev}
}
