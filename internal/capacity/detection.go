package capacity

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	"github.com/videngage/engagement/shared/moderation"
)

// shareMemoryShare is the part of an instance's memory a merge share's
// candidates may take (their peak, reading included); the rest is the
// process's and the reads' buffers.
const shareMemoryShare = 0.75

// DetectionPlan is DetectManipulation at the profile's reaction changes: a
// step's work (the partitions' scans and the merge's shares) against the
// invocations its jobs keep working, and the largest share's candidates
// against the share budget and the instance's memory.
type DetectionPlan struct {
	Layout Detection
	Step   time.Duration
	// ChangesPerStep are the reaction changes a step reads (the step and
	// the lookback before it), Candidates those the merge holds.
	ChangesPerStep, Candidates float64
	Shares                     int
	// LargestShare are the candidates the largest share holds, ShareMiB
	// its peak memory, BudgetMiB the memory of MaxShareCandidates.
	LargestShare, ShareMiB, BudgetMiB float64
	// CoreSeconds is a step's work on one core; Busy the invocations it
	// keeps busy throughout (one core each: a share runs on one).
	CoreSeconds, Busy float64
	// Working is how many invocations the jobs keep taking up work: each
	// job's runs a second times how long a run takes up work.
	Working  float64
	WorkTime time.Duration
}

// planDetection sizes the detection's jobs, instances and share budget.
func (p *Plan) planDetection(f *figures) error {
	fn, ok := p.Deployment.Functions["DetectManipulation"]
	if !ok {
		return nil
	}
	perChange := f.get("detection.candidates_per_change")
	bytes := f.get("detection.share_bytes_per_candidate")
	uneven := f.get("detection.largest_share_ratio")
	shareUS := f.get("detection.share_us_per_candidate")
	scanUS := f.get("detection.scan_us_per_change")
	if len(f.errs) > 0 {
		return errors.Join(f.errs...)
	}
	p.Figures = f.Used()

	l := p.Deployment.Detection
	b := max(min(l.MergeBuckets, l.Partitions), 1)
	dp := DetectionPlan{Layout: l, Step: detectmanipulationfn.DefaultStep, Shares: b * (b + 1) / 2}
	read := dp.Step + detectmanipulationfn.Lookback(moderation.DefaultParams)
	dp.ChangesPerStep = p.Profile.ReactionChangesPerSec * read.Seconds()
	dp.Candidates = perChange * dp.ChangesPerStep
	// A share holds two buckets' candidates (one when there is one
	// bucket), the largest uneven times an even share.
	dp.LargestShare = math.Min(dp.Candidates, uneven*dp.Candidates*math.Min(2/float64(b), 1))
	dp.ShareMiB = dp.LargestShare * bytes / (1 << 20)
	dp.BudgetMiB = float64(l.MaxShareCandidates) * bytes / (1 << 20)
	// Every candidate is held by the B shares of its bucket, and counted
	// once more by its own bucket's (i, i).
	dp.CoreSeconds = dp.ChangesPerStep*scanUS*1e-6 + float64(b+1)*dp.Candidates*shareUS*1e-6
	dp.Busy = dp.CoreSeconds / math.Min(fn.CPU, 1) / dp.Step.Seconds()
	dp.WorkTime = detectmanipulationfn.WorkBound(min(runBounds["DetectManipulation"], time.Duration(fn.Timeout)*time.Second))
	for _, j := range p.Deployment.Jobs {
		if j.Function == "DetectManipulation" {
			dp.Working += runsPerSecond(j.Schedule) * dp.WorkTime.Seconds()
		}
	}
	p.Detection = dp

	if dp.LargestShare > float64(l.MaxShareCandidates) {
		p.violate("DetectManipulation: the largest merge share holds %.1f million candidates at %s reaction changes/s, over max_share_candidates %d: every step would be skipped (raise merge_buckets)",
			dp.LargestShare/1e6, num(p.Profile.ReactionChangesPerSec), l.MaxShareCandidates)
	}
	if mem := float64(max(fn.Concurrency, 1)) * dp.BudgetMiB; mem > shareMemoryShare*fn.MemoryMiB {
		p.violate("DetectManipulation: %d share(s) at once × max_share_candidates %d × %.0f bytes = %.0f MiB, over %.0f%% of the instance's %.0f MiB (concurrency must be 1, the budget within memory)",
			max(fn.Concurrency, 1), l.MaxShareCandidates, bytes, mem, shareMemoryShare*100, fn.MemoryMiB)
	}
	if dp.Working < Headroom*dp.Busy {
		p.violate("DetectManipulation: its jobs keep %.0f invocations working (%d jobs' runs × %v each), but a step's work keeps %.1f busy at %s reaction changes/s: less than %g× headroom, so the detection falls behind (raise detection.jobs)",
			dp.Working, countFunctionJobs(p.Deployment, "DetectManipulation"), dp.WorkTime, dp.Busy, num(p.Profile.ReactionChangesPerSec), Headroom)
	}
	if slots := float64(fn.Slots()); slots < Headroom*dp.Busy {
		p.violate("DetectManipulation: %d instances × concurrency %d, but a step's work keeps %.1f invocations busy: less than %g× headroom",
			fn.MaxInstances, fn.Concurrency, dp.Busy, Headroom)
	}
	return nil
}

func countFunctionJobs(d *Deployment, fn string) int {
	n := 0
	for _, j := range d.Jobs {
		if j.Function == fn {
			n++
		}
	}
	return n
}

// writeDetection writes the detection's arithmetic as a paragraph.
func writeDetection(w io.Writer, p *Plan) {
	dp := p.Detection
	if dp.Shares == 0 {
		return
	}
	fmt.Fprintf(w, "Manipulation detection at %s reaction changes/s: a %v step reads %s changes, %s of them candidates; %d partitions, %d buckets (%d shares), the largest share %s candidates, %.0f MiB (budget %s, %.0f MiB); the scans and shares take %s core-seconds a step, %.1f invocations busy throughout, against %.1f kept working by %d jobs (runs taking up work for %v) and %d instances × %d.\n\n",
		num(p.Profile.ReactionChangesPerSec), dp.Step, num(dp.ChangesPerStep), num(dp.Candidates), dp.Layout.Partitions, dp.Layout.MergeBuckets, dp.Shares,
		num(dp.LargestShare), dp.ShareMiB, num(float64(dp.Layout.MaxShareCandidates)), dp.BudgetMiB, num(dp.CoreSeconds), dp.Busy, dp.Working,
		countFunctionJobs(p.Deployment, "DetectManipulation"), dp.WorkTime, p.Deployment.Functions["DetectManipulation"].MaxInstances, p.Deployment.Functions["DetectManipulation"].Concurrency)
}
