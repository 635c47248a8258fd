// Command benchmanip measures the automatic manipulation detection and
// writes docs/benchmarks/detection.md:
//
//  1. precision and recall over the generated scenarios of moderationtest,
//     one detection over the whole step (the job before partitions) beside
//     the partitioned detection (partitions by item, then one merge, and
//     the merge in shares);
//  2. generated steps of -sizes reaction changes (default 1,000,000 and
//     20,000,000): the one detection at the first size only (the baseline),
//     the partitioned detection at every size, in memory (the partitions'
//     scans, the one merge, the merge's -buckets·(-buckets+1)/2 shares and
//     its last stage, fed by the generator): time, peak heap per
//     invocation, invocations, precision and recall; and, from the first
//     size, the arithmetic at 100,000 changes a second;
//  3. the rate-spike signal on a generated spike;
//  4. the DetectManipulation job on the Spanner emulator over -emulator
//     reaction changes: time, invocations, Spanner work.
//
// Usage: go run ./cmd/benchmanip [-sizes 1000000,20000000] [-partitions 64] [-buckets 8] [-emulator 20000] [-out docs/benchmarks/detection.md]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/cmd/internal/benchstack"
	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	"github.com/videngage/engagement/internal/capacity"
	"github.com/videngage/engagement/internal/moderationtest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func main() { benchstack.Main("benchmanip", realMain) }

func realMain(ctx context.Context) error {
	sizesFlag := flag.String("sizes", "1000000,20000000", "reaction changes of the generated steps (comma-separated); the first is also run as one detection")
	partitions := flag.Int("partitions", 64, "partitions of the generated steps")
	buckets := flag.Int("buckets", 8, "buckets of partitions the merge of the generated steps is cut by (buckets·(buckets+1)/2 shares)")
	emulator := flag.Int("emulator", 20000, "reaction changes of the run on the Spanner emulator (0: none)")
	out := flag.String("out", "docs/benchmarks/detection.md", "the report")
	costs := flag.String("costs", "", "merge the detection's per-candidate costs into this JSON file (docs/benchmarks/costs.json, read by make capacity)")
	flag.Parse()
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-sizes: %w", err)
		}
		sizes = append(sizes, n)
	}
	stamp := benchreport.Start("")
	var b strings.Builder
	b.WriteString("Design and arithmetic: [design/manipulation.md](../design/manipulation.md). Peak heap is the most the Go heap held " +
		"above what it held before the invocation started (sampled every 10 ms, garbage not yet collected included): the invocation's " +
		"working memory. A partition's input is not in it (it streams its parts from Spanner; here the generator holds the whole step); the one merge's, " +
		"each merge share's and the last stage's are (each copies what it would read, every string its own, as decoding does), and the last stage's " +
		"figure is taken with a collection after each partition it reads.\n\n")

	p := moderation.DefaultParams
	if err := scenarios(&b, p); err != nil {
		return err
	}
	at, err := steps(&b, p, sizes, *partitions, *buckets)
	if err != nil {
		return err
	}
	spike(&b, p)
	if *emulator > 0 {
		if err := onEmulator(ctx, &b, *emulator); err != nil {
			return err
		}
	}
	const title = "Manipulation detection"
	fmt.Print(stamp.Report(title, b.String()))
	if err := stamp.Write(*out, title, b.String()); err != nil {
		return err
	}
	if *costs != "" {
		return benchreport.WriteCosts(*costs, "benchmanip", stamp, at.figures())
	}
	return nil
}

// scenarios: precision and recall of the one detection and of the
// partitioned one, side by side.
func scenarios(b *strings.Builder, p moderation.Params) error {
	b.WriteString("## The scenarios (one hour of reactions each)\n\n")
	b.WriteString("| scenario | reactions | ring accounts | one detection: flagged | precision | recall | 16 partitions + one merge: flagged | precision | recall | 16 partitions + merge in 10 shares: flagged | precision | recall |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range moderationtest.Scenarios() {
		w := s.Population.Generate(time.Now().UTC().Truncate(time.Minute))
		one, _, err := p.Detect(w.Reactions, w.FirstSeenOf)
		if err != nil {
			return err
		}
		parts, _ := moderationtest.Partitioned(p, w.Reactions, 16, w.Start, w.End)
		merged, _, err := p.Merge(parts, w.FirstSeenOf)
		if err != nil {
			return err
		}
		shared, _, _, err := moderationtest.MergedInShares(p, parts, 4, w.FirstSeenOf)
		if err != nil {
			return err
		}
		a, m, sh := w.ScoreOf(one), w.ScoreOf(merged), w.ScoreOf(shared)
		fmt.Fprintf(b, "| %s | %d | %d | %d | %.3f | %.3f | %d | %.3f | %.3f | %d | %.3f | %.3f |\n", s.Name, len(w.Reactions), a.RingAccounts,
			a.Flagged, a.Precision(), a.Recall(), m.Flagged, m.Precision(), m.Recall(), sh.Flagged, sh.Precision(), sh.Recall())
	}
	b.WriteString("\n")
	return nil
}

// platform is a step of about n reaction changes: the scenarios' ordinary
// and heavy users, a viral video, a channel's release and their rings, at
// scale.
func platform(n int) moderationtest.Population {
	users := n * 235 / 1000
	return moderationtest.Population{
		Seed: uint64(n), Ordinary: users, PerUser: 4, Catalogue: n, Heavy: n / 500, HeavyPerUser: 80, NewShare: 0.1,
		Viral: 3000, ViralSpread: 10 * time.Minute, Fans: 60, FanItems: 4, FanSpread: 15 * time.Minute,
		Rings: []moderationtest.Ring{
			{Size: 30, Items: 5, Spread: 5 * time.Minute},
			{Size: 200, Items: 3, Spread: 10 * time.Minute},
			{Size: 50, Items: 4, Spread: 5 * time.Minute, Dislike: true},
			{Size: 100, Items: 6, Spread: 8 * time.Minute},
			{Size: 80, Items: 8, Spread: 10 * time.Minute, Established: true},
			{Size: 60, Items: 5, Spread: 45 * time.Minute},
		},
	}
}

// measure runs f and returns its time and the peak heap above the heap
// before it.
func measure(f func()) (time.Duration, uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	started := time.Now()
	f()
	took := time.Since(started)
	close(stop)
	<-done
	runtime.ReadMemStats(&ms)
	top := max(peak.Load(), ms.HeapAlloc)
	if top < base {
		return took, 0
	}
	return took, top - base
}

func mib(n uint64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// decoded is parts as an invocation holds them once read: every string its
// own (the generator's are shared).
func decoded(parts []moderation.Partial) []moderation.Partial {
	out := make([]moderation.Partial, len(parts))
	for i, pt := range parts {
		out[i] = pt
		out[i].Candidates = make([]moderation.Reaction, len(pt.Candidates))
		for k, r := range pt.Candidates {
			out[i].Candidates[k] = moderation.Reaction{UserID: strings.Clone(r.UserID), ContentID: strings.Clone(r.ContentID), Reaction: strings.Clone(r.Reaction), At: r.At}
		}
	}
	return out
}

// scale is what the first generated step measured, for the arithmetic at
// the design rate.
type scale struct {
	candidateShare    float64       // candidates per reaction change read
	bytesPerCandidate float64       // the largest share's peak heap over its candidates
	uneven            float64       // the largest share over an even share (2/B of the candidates)
	perHandled        time.Duration // the shares' time over the candidates they held in all
	perScanned        time.Duration // the partitions' scan time over the changes they read
}

// The design rate (docs/design/manipulation.md) and a step as deployed.
const (
	designRate = 100_000 // reaction changes a second
	step       = detectmanipulationfn.DefaultStep
)

// figures are the scale's figures for the capacity model (-costs).
func (s scale) figures() map[string]capacity.Figure {
	if s.perHandled == 0 {
		return nil
	}
	return map[string]capacity.Figure{
		"detection.candidates_per_change":     {Value: s.candidateShare, Unit: "candidates", What: "candidates a partition keeps per reaction change it reads (generated step, Zipf catalogue as large as the step)"},
		"detection.share_bytes_per_candidate": {Value: s.bytesPerCandidate, Unit: "bytes", What: "peak heap of the largest merge share over the candidates it holds (reading included)"},
		"detection.largest_share_ratio":       {Value: s.uneven, Unit: "ratio", What: "the largest merge share over an even share (2/B of the step's candidates)"},
		"detection.share_us_per_candidate":    {Value: float64(s.perHandled.Nanoseconds()) / 1e3, Unit: "µs", What: "merge shares' time per candidate held, one core"},
		"detection.scan_us_per_change":        {Value: float64(s.perScanned.Nanoseconds()) / 1e3, Unit: "µs", What: "partitions' scan time per reaction change read (from memory: Spanner's reading not included), one core"},
	}
}

func (s scale) write(b *strings.Builder) {
	if s.perHandled == 0 {
		return
	}
	read := float64(designRate) * (step + detectmanipulationfn.Lookback(moderation.DefaultParams)).Seconds()
	c := s.candidateShare * read
	buckets := 1
	for s.uneven*min(2/float64(buckets), 1)*c > detectmanipulationfn.DefaultMaxCandidates {
		buckets++
	}
	perShare := s.uneven * min(2/float64(buckets), 1) * c
	shares := buckets * (buckets + 1) / 2
	cpu := float64(buckets+1)*c*s.perHandled.Seconds() + read*s.perScanned.Seconds()
	b.WriteString("## At 100,000 changes a second\n\n")
	fmt.Fprintf(b, "From the first generated step: %.0f %% of the changes read are candidates, a share holds %.0f bytes a candidate at its peak "+
		"(reading included), the largest share is %.2f times an even share (2/B of the candidates), the shares took %.1f µs a candidate held "+
		"and the scans %.2f µs a change read (on this machine, under the load stamped above; with -costs these go to docs/benchmarks/costs.json, "+
		"from which the capacity model checks the deployed layout, jobs and instances: [capacity.md](../capacity.md)).\n\n",
		100*s.candidateShare, s.bytesPerCandidate, s.uneven, float64(s.perHandled.Nanoseconds())/1e3, float64(s.perScanned.Nanoseconds())/1e3)
	fmt.Fprintf(b, "- A step reads %.0f million changes (%v of changes at %d a second), %.0f million of them candidates.\n", read/1e6,
		step+detectmanipulationfn.Lookback(moderation.DefaultParams), designRate, c/1e6)
	fmt.Fprintf(b, "- One merge would hold %.1f GiB.\n", c*s.bytesPerCandidate/(1<<30))
	fmt.Fprintf(b, "- B = %d buckets (at least as many partitions) is the fewest that keep the largest share within the default budget of %d candidates: "+
		"%d shares a step, the largest holding %.1f million candidates, %.2f GiB.\n", buckets, detectmanipulationfn.DefaultMaxCandidates, shares, perShare/1e6, perShare*s.bytesPerCandidate/(1<<30))
	fmt.Fprintf(b, "- Every candidate is held by B + 1 = %d shares; with the scans, %.0f s of one core a %v step: %.0f invocations busy throughout.\n\n",
		buckets+1, cpu, step, cpu/step.Seconds())
}

func steps(b *strings.Builder, p moderation.Params, sizes []int, partitions, buckets int) (scale, error) {
	var at scale
	b.WriteString("## Generated steps\n\n")
	fmt.Fprintf(b, "Each step is one hour of reaction changes of 0.235·n ordinary accounts (4 reactions each on average, on a catalogue of n items with "+
		"Zipf popularity), n/500 heavy users (80 each), a viral video (3,000 likes in 10 minutes), a channel's release (60 fans, 4 videos) and six rings "+
		"(30 on 5 items, 200 on 3, 50 disliking 4, 100 on 6, 80 established accounts on 8, 60 paced over 45 minutes: 520 ring accounts). "+
		"The partitioned detection cuts the step into %d partitions by item part; each partition's scan is one invocation, the merge another.\n\n", partitions)
	b.WriteString("| step | detection | invocations | time | peak heap per invocation | candidates | groups | flagged | precision | recall |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for k, n := range sizes {
		fmt.Fprintf(os.Stderr, "benchmanip: generating a step of %d…\n", n)
		gen := time.Now()
		w := platform(n).Generate(time.Now().UTC().Truncate(time.Minute))
		fmt.Fprintf(os.Stderr, "benchmanip: %d reactions in %v\n", len(w.Reactions), time.Since(gen).Round(time.Second))
		label := fmt.Sprintf("%d reactions, %d accounts", len(w.Reactions), len(w.FirstSeen))
		if k == 0 {
			var groups []moderation.Group
			var err error
			took, heap := measure(func() { groups, _, err = p.Detect(w.Reactions, w.FirstSeenOf) })
			if err != nil {
				return scale{}, err
			}
			sc := w.ScoreOf(groups)
			fmt.Fprintf(b, "| %s | one detection (the baseline) | 1 | %.1f s | %s | %d | %d | %d | %.3f | %.3f |\n", label, took.Seconds(), mib(heap),
				len(w.Reactions), len(groups), sc.Flagged, sc.Precision(), sc.Recall())
			fmt.Fprintf(os.Stderr, "benchmanip: one detection of %d in %v, %s\n", n, took, mib(heap))
		}
		// The partitions, one at a time as separate invocations would.
		byPart := make([][]moderation.Reaction, moderation.Parts)
		for _, r := range w.Reactions {
			i := moderation.PartOf(r.ContentID)
			byPart[i] = append(byPart[i], r)
		}
		parts := make([]moderation.Partial, partitions)
		var scanTime, slowest time.Duration
		var scanHeap uint64
		for i := range partitions {
			took, heap := measure(func() {
				lo, hi := moderation.PartRange(i, partitions)
				s := p.NewScan(w.Start, w.End)
				for k := lo; k < hi; k++ {
					for _, r := range byPart[k] {
						s.Add(r)
					}
					s.EndPart()
				}
				parts[i], _ = s.Finish()
			})
			scanTime += took
			slowest = max(slowest, took)
			scanHeap = max(scanHeap, heap)
		}
		byPart = nil
		candidates := 0
		for _, pt := range parts {
			candidates += len(pt.Candidates)
		}
		var groups []moderation.Group
		var st moderation.Stats
		var err error
		took, heap := measure(func() { groups, st, err = p.Merge(decoded(parts), w.FirstSeenOf) })
		if err != nil {
			return scale{}, err
		}
		sc := w.ScoreOf(groups)
		fmt.Fprintf(b, "| %s | %d partitions: scans | %d | %.1f s in all, %.2f s the slowest | %s the largest | | | | | |\n", label, partitions, partitions,
			scanTime.Seconds(), slowest.Seconds(), mib(scanHeap))
		fmt.Fprintf(b, "| | one merge | 1 | %.1f s | %s | %d (%.0f %%; %d popular items left out) | %d | %d | %.3f | %.3f |\n", took.Seconds(), mib(heap),
			candidates, 100*float64(candidates)/float64(len(w.Reactions)), st.Popular, len(groups), sc.Flagged, sc.Precision(), sc.Recall())
		fmt.Fprintf(os.Stderr, "benchmanip: partitioned %d: scans %v (slowest %v, %s), one merge %v %s, %d candidates\n", n, scanTime, slowest, mib(scanHeap), took, mib(heap), candidates)

		// The merge in shares, one at a time as separate invocations would,
		// each reading (here: copying) its two buckets' candidates.
		accounts, err := moderation.StepAccounts(parts)
		if err != nil {
			return scale{}, err
		}
		shares := make([]moderation.PairShare, moderation.MergeShares(buckets))
		var shareTime, shareSlowest time.Duration
		var shareHeap, largestHeap uint64
		largest, handled := 0, 0
		for i := range shares {
			x, y := moderation.ShareBuckets(i, buckets)
			took, heap := measure(func() {
				lo, hi := moderation.BucketPartitions(x, buckets, partitions)
				a := decoded(parts[lo:hi])
				var c []moderation.Partial
				if y != x {
					lo, hi := moderation.BucketPartitions(y, buckets, partitions)
					c = decoded(parts[lo:hi])
				}
				shares[i], err = p.MergeShare(a, c, accounts)
			})
			if err != nil {
				return scale{}, err
			}
			shareTime += took
			shareSlowest = max(shareSlowest, took)
			shareHeap = max(shareHeap, heap)
			largest = max(largest, shares[i].Candidates)
			handled += shares[i].Candidates
			if shares[i].Candidates == largest {
				largestHeap = heap
			}
		}
		// The last stage twice: timed as it runs, then measured with a
		// collection after each partition it reads (a partition read is
		// garbage once visited, and an instance near its memory limit
		// collects it), so the heap is what the stage holds rather than
		// what it has read.
		var mst moderation.Stats
		last := func(collect bool) {
			each := func(visit func(moderation.Partial) error) error {
				for _, pt := range parts {
					if err := visit(decoded([]moderation.Partial{pt})[0]); err != nil {
						return err
					}
					if collect {
						runtime.GC()
					}
				}
				return nil
			}
			groups, mst, err = p.MergeGroups(shares, accounts, each, w.FirstSeenOf)
		}
		took, _ = measure(func() { last(false) })
		if err != nil {
			return scale{}, err
		}
		_, heap = measure(func() { last(true) })
		if err != nil {
			return scale{}, err
		}
		sc = w.ScoreOf(groups)
		fmt.Fprintf(b, "| | merge in %d shares (%d buckets): shares | %d | %.1f s in all, %.2f s the slowest | %s the largest | %d the largest share (%.0f %%) | | | | |\n",
			len(shares), buckets, len(shares), shareTime.Seconds(), shareSlowest.Seconds(), mib(shareHeap), largest, 100*float64(largest)/float64(max(candidates, 1)))
		fmt.Fprintf(b, "| | merge in %d shares: last stage | 1 | %.1f s | %s | %d strong pairs, %d clusters | %d | %d | %.3f | %.3f |\n", len(shares), took.Seconds(), mib(heap),
			mst.StrongPairs, mst.Clusters, len(groups), sc.Flagged, sc.Precision(), sc.Recall())
		maybePairs, waiting := 0, 0
		for _, sh := range shares {
			maybePairs += len(sh.Maybe)
			for _, m := range sh.Maybe {
				waiting += len(m.Accounts)
			}
		}
		fmt.Fprintf(os.Stderr, "benchmanip: %d shares %v (slowest %v, %s), last stage %v %s; %d pairs waiting on %d accounts\n", len(shares), shareTime, shareSlowest, mib(shareHeap), took, mib(heap), maybePairs, waiting)
		if k == 0 {
			at = scale{candidateShare: float64(candidates) / float64(len(w.Reactions)), bytesPerCandidate: float64(largestHeap) / float64(largest),
				uneven: float64(largest) / (2 * float64(candidates) / float64(buckets)), perHandled: shareTime / time.Duration(handled),
				perScanned: scanTime / time.Duration(len(w.Reactions))}
		}
		parts, w = nil, moderationtest.World{}
	}
	b.WriteString("\n")
	at.write(b)
	return at, nil
}

// spike plants an item whose likes rise a thousandfold in one minute in a
// step of ordinary traffic and reports what the partitions flag for review.
func spike(b *strings.Builder, p moderation.Params) {
	end := time.Now().UTC().Truncate(time.Minute)
	w := moderationtest.Scenarios()[1].Population.Generate(end) // ordinary users and a viral video
	from := end.Add(-5 * time.Minute)
	m := from.Add(2 * time.Minute)
	for i := range 3 {
		w.Reactions = append(w.Reactions, moderation.Reaction{UserID: fmt.Sprint("base", i), ContentID: "spiked", Reaction: "like", At: m.Add(-time.Duration(5+10*i) * time.Minute)})
	}
	for i := range 150 {
		w.Reactions = append(w.Reactions, moderation.Reaction{UserID: fmt.Sprint("burst", i), ContentID: "spiked", Reaction: "like", At: m.Add(time.Duration(i) * 300 * time.Millisecond)})
	}
	_, all := moderationtest.Partitioned(p, w.Reactions, 16, from, end)
	b.WriteString("## The rate-spike signal\n\n")
	fmt.Fprintf(b, "A step of the viral-video scenario (%d reactions) with a planted item, `spiked`: 3 likes in the 30 minutes before, then 150 in one minute "+
		"(1,500 times its baseline), read as the job's last 5-minute step with 16 partitions. Flagged for review (factor %.0f, baseline %v, floor %.1f a minute):\n\n",
		len(w.Reactions), p.SpikeFactor, p.SpikeBaseline, p.SpikeMinBaseline)
	b.WriteString("| item | minute | reactions in the minute | baseline (a minute) | rise |\n|---|---|--:|--:|--:|\n")
	n := 0
	for _, sp := range all {
		for _, s := range sp {
			n++
			fmt.Fprintf(b, "| %s/%s | %s | %d | %.2f | ×%.0f |\n", s.Item.ContentID, s.Item.Reaction, s.Minute.Format("15:04"), s.Reactions, s.Baseline,
				float64(s.Reactions)/max(s.Baseline, p.SpikeMinBaseline))
		}
	}
	if n == 0 {
		b.WriteString("| (none) | | | | |\n")
	}
	b.WriteString("\nThe viral video's minutes fall before this step (it was judged, and would be flagged, by the step that holds them).\n\n")
}

// onEmulator runs the job over a generated step on the Spanner emulator.
func onEmulator(ctx context.Context, b *strings.Builder, n int) error {
	w, err := benchstack.Start(ctx, "benchmanip", fmt.Sprintf("benchmanip-%d", time.Now().UnixNano()), nil)
	if err != nil {
		return err
	}
	defer w.Close()
	db := w.DB
	now := time.Now().UTC()
	pop := moderationtest.Scenarios()[4].Population // a ring of 200 beside a viral video
	pop.Ordinary = max(n/4, 1000)
	world := pop.Generate(now.Add(-30 * time.Minute))
	fmt.Fprintf(os.Stderr, "benchmanip: writing %d reactions to the emulator…\n", len(world.Reactions))
	for _, ms := range world.Mutations(500) {
		if _, err := db.Client.Apply(spannerdb.Uncounted(ctx), ms); err != nil {
			return err
		}
	}
	const partitions = 16
	h := detectmanipulationfn.New(detectmanipulationfn.Deps{Store: detectmanipulationfn.Stores(reactionstore.New(db), moderationstore.New(db, moderationstore.Gate{})), Leases: leasestore.New(db, nil),
		Partitions: partitions, FirstLookback: 2 * time.Hour})
	fmt.Fprintf(b, "## The job on the Spanner emulator\n\n%d reaction changes over the last 2 hours (the scenario of a ring of 200 beside a viral video, %d ring accounts), "+
		"%d partitions, the merge in 10 shares (4 buckets), steps of 5 minutes, one invocation (which works every partition, merge share and merge in turn; in the cloud the per-minute invocations share them). "+
		"Spanner work counted on the wire.\n\n", len(world.Reactions), len(world.Ring), partitions)
	b.WriteString("| run | time | partition steps | merge shares | merges | reactions read | candidates | Spanner reads | commits | rows written | flagged | spikes |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, name := range []string{"first (2 h)", "next (nothing new)"} {
		before, started := otelcount.Global().Spanner(), time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/internal/detect-manipulation", strings.NewReader("{}")))
		took := time.Since(started)
		c := otelcount.Global().Spanner().Minus(before)
		if rec.Code != http.StatusOK {
			return fmt.Errorf("run: %d %s", rec.Code, rec.Body)
		}
		var rep detectmanipulationfn.Report
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			return err
		}
		fmt.Fprintf(b, "| %s | %.1f s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", name, took.Seconds(), rep.PartitionSteps, rep.MergeShares, rep.Steps,
			rep.Reactions, rep.Candidates, c.Reads, c.Commits, c.RowWrites, rep.Flagged, rep.Spikes)
	}
	b.WriteString("\n")
	return nil
}
