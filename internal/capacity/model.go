// Package capacity is the deployment's capacity model: it reads each
// environment's settings from its Terraform (the function limits, Spanner
// and Bigtable capacity) and the schedules from topology.json, derives the
// work of the design load from the per-operation costs the benchmarks
// measured (docs/benchmarks/costs.json), and checks that every function,
// database and schedule carries it with headroom.
package capacity

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	expirehistoryfn "github.com/videngage/engagement/functions/expirehistory"
	reconcilefn "github.com/videngage/engagement/functions/reconcile"
	resumeerasuresfn "github.com/videngage/engagement/functions/resumeerasures"
	rollupfn "github.com/videngage/engagement/functions/rollup"
	"github.com/videngage/engagement/shared/topology"
)

// Headroom is what every limit must leave above the design load's need.
const Headroom = 2.0

// Profile is the load an environment is built to carry.
type Profile struct {
	Name             string
	ReactionsPerSec  float64 // on one item
	CommentsPerSec   float64 // on one video
	CountReadsPerSec float64 // of 50 ids each
	ViewsPerSec      float64 // recorded watches
	// ReactionChangesPerSec are reaction changes a second over all items:
	// what the manipulation detection reads.
	ReactionChangesPerSec float64
	// SignedInShare is the part of the count reads that are signed in
	// (/v1/me/counts); the rest are anonymous (/v1/counts). No read is
	// assumed served by Cloud CDN: the origin carries a cold cache.
	SignedInShare float64
}

// Design is the design load of the product.
var Design = Profile{
	Name:             "design load",
	ReactionsPerSec:  50_000,
	CommentsPerSec:   50_000,
	CountReadsPerSec: 250_000,
	ViewsPerSec:      100_000,
	// The detection keeps up with 100,000 reaction changes a second over
	// the whole catalogue (docs/design/manipulation.md).
	ReactionChangesPerSec: 100_000,
	SignedInShare:         0.5,
}

// devShare is the part of the design load dev is built for: a development
// environment for integration and release checks at the rates the local
// benchmarks and the soak drive (hundreds of requests a second), not a
// second production.
const devShare = 0.001

// ProfileFor is the load environment env is built to carry: the design
// load in prod, a thousandth of it in dev.
func ProfileFor(env string) (Profile, error) {
	switch env {
	case "prod":
		return Design, nil
	case "dev":
		p := Design
		p.Name = fmt.Sprintf("%g%% of the design load", devShare*100)
		p.ReactionsPerSec *= devShare
		p.CommentsPerSec *= devShare
		p.CountReadsPerSec *= devShare
		p.ViewsPerSec *= devShare
		p.ReactionChangesPerSec *= devShare
		return p, nil
	}
	return Profile{}, fmt.Errorf("no load profile for environment %q", env)
}

// runBounds is how long one run of each scheduled function holds its
// request at most: the bound its handler puts on a run, as deployed.
var runBounds = map[string]time.Duration{
	"Rollup":             rollupfn.RunTimeout(rollupfn.DefaultPeriod),
	"Reconcile":          reconcilefn.DefaultTimeout,
	"DetectManipulation": detectmanipulationfn.DefaultTimeout,
	"ExpireHistory":      expirehistoryfn.RunTimeout(expirehistoryfn.DefaultBudget),
	"ResumeErasures":     resumeerasuresfn.RunTimeout,
}

// Bigtable rows per operation, counted from the code paths (not measured:
// the emulator's client does not count them).
const (
	// ratelimit.Bigtable.AllowMany: a cell written into the user's window
	// row (one MutateRows per group), the rows read back (one ReadRows).
	reactionBigtableWrites = 1
	reactionBigtableReads  = 1
	// Per watch: the history limit's check-and-mutate (a read and a write),
	// historystore.Apply's entry, mark and the removal of an older entry of
	// the video (three writes) and its read of the video's watch_latest row,
	// the views' claim (a check-and-mutate: a read and a write). The
	// staged batch row, its fold's scan and delete are per batch.
	watchBigtableWrites = 5
	watchBigtableReads  = 3
	// A message applied again in the other region (its own subscription):
	// ApplyCounters' transaction reads the event's outbox rows and finds
	// them gone (outboxstore.Apply); ApplyHistory writes the entry, mark
	// and removal again and reads the video's watch_latest row; ApplyViews
	// checks and sets the claim again (a read and a write).
	duplicateCounterSpannerReads = 1
	duplicateWatchBigtableWrites = 4
	duplicateWatchBigtableReads  = 2
)

// consumers are the push consumers sized by the time a message holds an
// instance, and the figure of their CPU per message, which sizes them
// once an instance takes several pushes at once.
var consumers = map[string]string{
	"ApplyCounters": "applycounters.cpu_us_per_message",
	"ApplyHistory":  "applyhistory.cpu_us_per_message",
	"ApplyViews":    "applyviews.cpu_us_per_message",
}

// FunctionPlan is one function at the environment's load.
type FunctionPlan struct {
	Function
	// RequestsPerSec are requests, pushes or job runs a second.
	RequestsPerSec float64
	// BusySlots are the requests in flight at once: the rate times the
	// time a request holds its slot, or the jobs' peak overlap.
	BusySlots float64
	// BusyVCPU is the CPU the load keeps busy.
	BusyVCPU float64
	// Instances is what the load makes Cloud Run run: enough slots for the
	// requests in flight and enough CPU at its 60% target.
	Instances float64
	// Basis says where the figures come from.
	Basis string
	// Overlap and RunBound are a scheduled function's.
	Overlap  Overlap
	RunBound time.Duration
}

// Cost is an hourly cost at list prices, USD.
type Cost struct {
	Functions, Requests, Spanner, Bigtable, PubSub float64
}

// Total is the sum.
func (c Cost) Total() float64 { return c.Functions + c.Requests + c.Spanner + c.Bigtable + c.PubSub }

// Plan is an environment's capacity at its load, and what it lacks.
type Plan struct {
	Env        string
	Profile    Profile
	Deployment *Deployment
	Functions  []FunctionPlan

	SpannerReadsPerSec, SpannerWritesPerSec float64
	// SpannerPU is what the load needs at the autoscaler's CPU target (or
	// at full use when capacity is fixed); SpannerPUHeadroom with headroom.
	SpannerPU, SpannerPUHeadroom float64

	BigtableReadsPerSec, BigtableWritesPerSec float64
	// BigtableNodes is what each cluster needs at the autoscaler's CPU
	// target: every cluster takes every write (replication) and, on
	// failover, every read.
	BigtableNodes, BigtableNodesHeadroom float64

	// PubSubBytesPerSec is message data published and delivered;
	// PubSubBilledPerSec counts each request as at least 1,000 bytes.
	PubSubBytesPerSec, PubSubBilledPerSec float64

	// DesignVCPU is the CPU of every function's instances at the load.
	DesignVCPU float64
	// RegionVCPU is the Cloud Run CPU one region uses when it carries the
	// whole load alone (the other region lost).
	RegionVCPU float64
	// Quotas are the quotas the plan needs, and what Terraform asks for.
	Quotas []Need
	// DuplicateDeliveries is how many more times than once each message
	// is applied: once in every region (each region's subscription).
	DuplicateDeliveries int

	// Detection is the manipulation detection at the load's reaction
	// changes.
	Detection DetectionPlan

	Cost Cost
	// Prices are the price per million operations of each kind, and of
	// all of them.
	Prices     []Price
	Violations []string
	// Figures are the measured figures the plan used.
	Figures []string

	work        map[string]*kindWork
	counterMsgs map[string]float64 // counter messages a second, by kind
	fnCost      map[string]float64 // hourly cost of each function
}

// Err is nil when the environment carries its load, else every shortfall.
func (p *Plan) Err() error {
	if len(p.Violations) == 0 {
		return nil
	}
	return fmt.Errorf("%s does not carry %s:\n  %s", p.Env, p.Profile.Name, strings.Join(p.Violations, "\n  "))
}

func (p *Plan) violate(format string, args ...any) {
	p.Violations = append(p.Violations, fmt.Sprintf(format, args...))
}

// Model plans deployment d at load prof from the measured costs c.
func Model(d *Deployment, c *Costs, prof Profile) (*Plan, error) {
	p := &Plan{Env: d.Env, Profile: prof, Deployment: d}
	f := &figures{c: c}
	R, C, V := prof.ReactionsPerSec, prof.CommentsPerSec, prof.ViewsPerSec
	signed := prof.CountReadsPerSec * prof.SignedInShare
	anon := prof.CountReadsPerSec - signed

	// What one serving process took per operation, and how long a request
	// held its slot there (Little's law: clients in flight over the rate).
	reactionCPU := f.get("reaction.cpu_us") * 1e-6
	reactionWall := f.get("reaction.clients") / f.get("reaction.accepted_per_s")
	commentCPU := f.get("comment.cpu_us") * 1e-6
	commentWall := f.get("comment.clients") / f.get("comment.accepted_per_s")
	viewCPU := f.get("view.cpu_us") * 1e-6
	viewWall := f.get("view.clients") / f.get("view.accepted_per_s")
	anonCPU := f.get("counts.anonymous.cpu_us") * 1e-6
	anonWall := f.get("counts.anonymous.readers") / f.get("counts.anonymous.reads_per_s")
	signedCPU := f.get("counts.signed_in.cpu_us") * 1e-6
	signedWall := f.get("counts.signed_in.readers") / f.get("counts.signed_in.reads_per_s")

	reactionMsgs := R * f.get("reaction.messages_per_1000") / 1000
	commentMsgs := C * f.get("comment.messages_per_1000") / 1000
	p.counterMsgs = map[string]float64{KindReaction: reactionMsgs, KindComment: commentMsgs}
	historyMsgs := V * f.get("view.messages_per_1000") / 1000

	type demand struct {
		rate, slots, vcpu float64
		basis             string
	}
	demands := map[string]demand{
		"Reactions": {R, R * reactionWall, R * reactionCPU,
			"reactions/s × measured CPU and time a request (the CPU figure includes ApplyCounters and Rollup: charged here)"},
		"Comments": {C, C * commentWall, C * commentCPU,
			"comments/s × measured CPU and time a request (CPU includes the consumer, the folds and the benchmark's clients)"},
		"History": {V, V * viewWall, V * viewCPU,
			"watches/s × measured CPU and time a request (CPU includes both consumers, the folds and the benchmark's clients)"},
		"Counts": {anon + signed, anon*anonWall + signed*signedWall, anon*anonCPU + signed*signedCPU,
			fmt.Sprintf("%.0f%% signed-in reads, no CDN hits; measured CPU and time a read of each kind", prof.SignedInShare*100)},
		// The time a message held the local stack's push endpoint is the
		// slot it occupies; an instance taking several pushes at once is
		// sized by CPU per message below.
		"ApplyCounters": {reactionMsgs + commentMsgs,
			reactionMsgs*f.get("reaction.push_ms")/1000 + commentMsgs*f.get("comment.push_ms")/1000, 0,
			"counter messages/s (reactions and comments) × measured time ApplyCounters held one"},
		"ApplyHistory": {historyMsgs, historyMsgs * f.get("view.apply_history_push_ms") / 1000, 0,
			"history messages/s × measured time ApplyHistory held one"},
		"ApplyViews": {historyMsgs, historyMsgs * f.get("view.apply_views_push_ms") / 1000, 0,
			"history messages/s × measured time ApplyViews held one"},
	}

	// Spanner and Bigtable work, and Pub/Sub data.
	p.SpannerWritesPerSec = R*f.get("reaction.spanner_row_writes_per_1000")/1000 +
		C*f.get("comment.spanner_row_writes_per_1000")/1000 +
		V*f.get("view.spanner_row_writes_per_1000")/1000
	p.SpannerReadsPerSec = R*f.get("reaction.spanner_reads_per_1000")/1000 +
		C*f.get("comment.spanner_reads_per_1000")/1000 +
		V*f.get("view.spanner_reads_per_1000")/1000 +
		anon*f.get("counts.anonymous.spanner_reads_per_1000")/1000 +
		signed*f.get("counts.signed_in.spanner_reads_per_1000")/1000
	p.BigtableWritesPerSec = R*reactionBigtableWrites + V*watchBigtableWrites
	p.BigtableReadsPerSec = R*reactionBigtableReads + V*watchBigtableReads
	// Each region's subscriptions deliver every message to that region's
	// consumers; the second application changes nothing but is work: a
	// counter message's transaction reads its outbox rows (gone) and
	// commits nothing, a history message is written again and its claims
	// checked again.
	p.DuplicateDeliveries = len(d.Regions) - 1
	dup := float64(p.DuplicateDeliveries)
	p.SpannerReadsPerSec += dup * (reactionMsgs + commentMsgs) * duplicateCounterSpannerReads
	p.BigtableWritesPerSec += dup * V * duplicateWatchBigtableWrites
	p.BigtableReadsPerSec += dup * V * duplicateWatchBigtableReads

	// The same work by kind of operation, for its price (price.go).
	p.work = map[string]*kindWork{
		KindReaction: {ops: R,
			spannerReads:  R*f.get("reaction.spanner_reads_per_1000")/1000 + dup*reactionMsgs*duplicateCounterSpannerReads,
			spannerWrites: R * f.get("reaction.spanner_row_writes_per_1000") / 1000,
			bigtableReads: R * reactionBigtableReads, bigtableWrites: R * reactionBigtableWrites},
		KindComment: {ops: C,
			spannerReads:  C*f.get("comment.spanner_reads_per_1000")/1000 + dup*commentMsgs*duplicateCounterSpannerReads,
			spannerWrites: C * f.get("comment.spanner_row_writes_per_1000") / 1000},
		KindWatch: {ops: V,
			spannerReads:   V * f.get("view.spanner_reads_per_1000") / 1000,
			spannerWrites:  V * f.get("view.spanner_row_writes_per_1000") / 1000,
			bigtableReads:  V * (watchBigtableReads + dup*duplicateWatchBigtableReads),
			bigtableWrites: V * (watchBigtableWrites + dup*duplicateWatchBigtableWrites)},
		KindCountRead: {ops: anon + signed,
			spannerReads: anon*f.get("counts.anonymous.spanner_reads_per_1000")/1000 + signed*f.get("counts.signed_in.spanner_reads_per_1000")/1000},
	}

	subs := func(topic string) float64 { return float64(len(d.Pushes[topic])) }
	type flow struct{ msgs, bytesPerMsg, deliveries float64 }
	flows := []flow{
		{reactionMsgs, f.get("reaction.message_bytes_per_1000") / f.get("reaction.messages_per_1000"), subs("counter-events")},
		{commentMsgs, f.get("comment.message_bytes_per_1000") / f.get("comment.messages_per_1000"), subs("counter-events")},
		{historyMsgs, f.get("view.message_bytes_per_1000") / f.get("view.messages_per_1000"), subs("history-events")},
	}
	flowKinds := []string{KindReaction, KindComment, KindWatch}
	for i, fl := range flows {
		// Published once, pushed once per subscription and region; each
		// push is a request of its own, and so is each publish at worst.
		deliveries := fl.deliveries * float64(len(d.Regions))
		p.PubSubBytesPerSec += fl.msgs * fl.bytesPerMsg * (1 + deliveries)
		billed := fl.msgs * math.Max(fl.bytesPerMsg, pubSubMinBillBytes) * (1 + deliveries)
		p.PubSubBilledPerSec += billed
		p.work[flowKinds[i]].pubsubBilled += billed
	}
	if len(f.errs) > 0 {
		return nil, errors.Join(f.errs...)
	}
	p.Figures = f.Used()

	// Functions.
	schedules := map[string]map[string]string{}
	for _, j := range d.Jobs {
		if _, ok := d.Functions[j.Function]; !ok {
			return nil, fmt.Errorf("job %s calls %s, which is not deployed", j.Name, j.Function)
		}
		if schedules[j.Function] == nil {
			schedules[j.Function] = map[string]string{}
		}
		schedules[j.Function][j.Name] = j.Schedule
	}
	for _, name := range d.FunctionNames() {
		fn := d.Functions[name]
		fp := FunctionPlan{Function: fn}
		if fn.Concurrency < 1 || fn.MaxInstances < 1 || fn.CPU <= 0 {
			p.violate("%s: concurrency %d, max instances %d, CPU %g: it cannot serve a request", name, fn.Concurrency, fn.MaxInstances, fn.CPU)
		}
		switch fn.Kind {
		case topology.KindScheduled:
			if err := p.planScheduled(&fp, schedules[name]); err != nil {
				return nil, err
			}
		default:
			dm, ok := demands[name]
			if !ok {
				fp.Basis = "no design rate: sized by its settings only"
				break
			}
			fp.RequestsPerSec, fp.BusySlots, fp.BusyVCPU, fp.Basis = dm.rate, dm.slots, dm.vcpu, dm.basis
			if _, consumer := consumers[name]; consumer && fn.Concurrency > 1 {
				// Pushes side by side share an instance's CPU: its CPU
				// per message, not the time a message is held, sizes it.
				fp.BusyVCPU = dm.rate * f.get(consumers[name]) * 1e-6
				fp.Basis += fmt.Sprintf("; %d pushes at once, so CPU per message (%s) too", fn.Concurrency, consumers[name])
				if len(f.errs) > 0 {
					return nil, errors.Join(f.errs...)
				}
				p.Figures = f.Used()
			}
		}
		fp.Instances = math.Max(fp.BusySlots/float64(max(fn.Concurrency, 1)), fp.BusyVCPU/(fn.CPU*cloudRunCPUTarget))
		if fn.Kind == topology.KindScheduled {
			// Each run is a request Cloud Run must place at once.
			fp.Instances = math.Ceil(fp.BusySlots / float64(max(fn.Concurrency, 1)))
		}
		p.checkFunction(fp)
		p.Functions = append(p.Functions, fp)
		p.DesignVCPU += fp.Instances * fn.CPU
	}

	if err := p.planDetection(f); err != nil {
		return nil, err
	}
	p.planPrepareExport()
	p.planSpanner(d.Spanner)
	p.planBigtable(d.Bigtable)
	p.planRegions()
	p.cost()
	return p, nil
}

// planScheduled sizes a scheduled function by its jobs' peak overlap.
func (p *Plan) planScheduled(fp *FunctionPlan, jobs map[string]string) error {
	bound, ok := runBounds[fp.Name]
	if !ok {
		return fmt.Errorf("scheduled function %s: no run bound known (add it to runBounds)", fp.Name)
	}
	fp.RunBound = bound
	timeout := time.Duration(fp.Timeout) * time.Second
	if timeout < bound {
		p.violate("%s: timeout %v is shorter than a run's own bound %v: Cloud Run ends runs the code means to finish", fp.Name, timeout, bound)
	}
	hold := min(bound, timeout)
	holds := map[string]time.Duration{}
	for j := range jobs {
		holds[j] = hold
	}
	ov, err := peakOverlap(jobs, holds)
	if err != nil {
		return fmt.Errorf("%s: %w", fp.Name, err)
	}
	sort.Strings(ov.Jobs)
	fp.Overlap = ov
	fp.BusySlots = float64(ov.Peak)
	// A run may keep a vCPU busy (the rollup's fold workers, the
	// reconciliation's slices).
	fp.BusyVCPU = float64(ov.Peak) * fp.CPU / float64(max(fp.Concurrency, 1))
	fp.BusyVCPU = math.Min(fp.BusyVCPU, float64(ov.Peak))
	for _, j := range jobs {
		fp.RequestsPerSec += runsPerSecond(j)
	}
	fp.Basis = fmt.Sprintf("jobs %s, each holding its request up to %v", strings.Join(sortedKeys(jobs), ", "), hold)
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func runsPerSecond(schedule string) float64 {
	mins, err := minutesOfDay(schedule)
	if err != nil {
		return 0
	}
	return float64(len(mins)) / 86400
}

// checkFunction holds a function's limits against its load.
func (p *Plan) checkFunction(fp FunctionPlan) {
	slots := float64(fp.Slots())
	if fp.Kind == topology.KindScheduled {
		switch {
		case slots < fp.BusySlots:
			p.violate("%s: %d instances × concurrency %d = %d requests at once, but its jobs hold %d at once (%s at %s): the rest wait for an instance and get 429, and Scheduler does not retry",
				fp.Name, fp.MaxInstances, fp.Concurrency, fp.Slots(), fp.Overlap.Peak, strings.Join(fp.Overlap.Jobs, ", "), clock(fp.Overlap.At))
		case slots < Headroom*fp.BusySlots:
			p.violate("%s: %d requests at once for %d overlapping runs: less than %g× headroom", fp.Name, fp.Slots(), fp.Overlap.Peak, Headroom)
		}
		return
	}
	if fp.BusySlots == 0 && fp.BusyVCPU == 0 {
		return
	}
	if slots < Headroom*fp.BusySlots {
		p.violate("%s: %d instances × concurrency %d = %d requests at once, need %.0f (%.0f in flight at %s × %g headroom)",
			fp.Name, fp.MaxInstances, fp.Concurrency, fp.Slots(), math.Ceil(Headroom*fp.BusySlots), fp.BusySlots, p.Profile.Name, Headroom)
	}
	if vcpu := float64(fp.MaxInstances) * fp.CPU; vcpu < Headroom*fp.BusyVCPU {
		p.violate("%s: %d instances × %g vCPU = %.0f vCPU, need %.0f (%.1f busy × %g headroom)",
			fp.Name, fp.MaxInstances, fp.CPU, vcpu, math.Ceil(Headroom*fp.BusyVCPU), fp.BusyVCPU, Headroom)
	}
	if float64(fp.MaxInstances) < Headroom*fp.Instances {
		p.violate("%s: max %d instances, need %.0f (%.1f at %s at Cloud Run's %.0f%% CPU target × %g headroom)",
			fp.Name, fp.MaxInstances, math.Ceil(Headroom*fp.Instances), fp.Instances, p.Profile.Name, cloudRunCPUTarget*100, Headroom)
	}
}

func clock(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d UTC", int(d.Hours())%24, int(d.Minutes())%60)
}

// planSpanner sizes the Spanner instance: nodes for the reads plus nodes
// for the writes, at the published rates of its configuration.
func (p *Plan) planSpanner(s Spanner) {
	reads, writes := float64(spannerRegionalReadsPerNode), float64(spannerRegionalWritesPerNode)
	if s.MultiRegion() {
		reads, writes = spannerMultiReadsPerNode, spannerMultiWritesPerNode
	}
	full := 1000 * (p.SpannerReadsPerSec/reads + p.SpannerWritesPerSec/writes)
	p.SpannerPU = full
	if s.HighPriorityCPUPercent > 0 {
		p.SpannerPU = full / (s.HighPriorityCPUPercent / 100)
	}
	// The maximum is twice the need: at the autoscaler's CPU target when
	// it scales, at full use when capacity is fixed.
	p.SpannerPUHeadroom = Headroom * p.SpannerPU
	if float64(s.MaxProcessingUnits) < p.SpannerPUHeadroom {
		target := "fixed capacity"
		if s.HighPriorityCPUPercent > 0 {
			target = fmt.Sprintf("and the autoscaler's %.0f%% CPU target", s.HighPriorityCPUPercent)
		}
		p.violate("Spanner: at most %d processing units, need %.0f (%.0f reads/s, %.0f row writes/s at %s: %.0f PU at full use; %g× headroom, %s)",
			s.MaxProcessingUnits, math.Ceil(p.SpannerPUHeadroom), p.SpannerReadsPerSec, p.SpannerWritesPerSec, p.Profile.Name, full, Headroom, target)
	}
}

// planBigtable sizes each Bigtable cluster: every cluster takes every
// write, and one may take every read (single-cluster routing, failover).
func (p *Plan) planBigtable(cs []BigtableCluster) {
	full := p.BigtableWritesPerSec/bigtableWriteRowsPerNode + p.BigtableReadsPerSec/bigtableReadRowsPerNode
	const cpuTarget = 0.6 // the module's bigtable_cpu_target default
	p.BigtableNodes = full / cpuTarget
	p.BigtableNodesHeadroom = Headroom * p.BigtableNodes
	for _, c := range cs {
		if c.StorageType != "SSD" {
			p.violate("Bigtable cluster %s: storage %s, planned for SSD", c.ID, c.StorageType)
		}
		if float64(c.MaxNodes) < p.BigtableNodesHeadroom {
			p.violate("Bigtable cluster %s: at most %d nodes, need %.0f (%.0f row writes/s and %.0f row reads/s at %s: %.1f nodes at full use; at the 60%% CPU target × %g headroom)",
				c.ID, c.MaxNodes, math.Ceil(p.BigtableNodesHeadroom), p.BigtableWritesPerSec, p.BigtableReadsPerSec, p.Profile.Name, full, Headroom)
		}
	}
}

// cost prices an hour at the load, at list prices.
func (p *Plan) cost() {
	var reqs float64
	for _, fp := range p.Functions {
		gib := fp.MemoryMiB / 1024
		// Every region's consumers apply every message.
		n := 1.0
		if fp.Kind == topology.KindEvent {
			n += float64(p.DuplicateDeliveries)
		}
		// Request-based billing: instances are billed while they serve.
		c := n * fp.Instances * (fp.CPU*priceVCPUSecond + gib*priceGiBSecond) * 3600
		if p.fnCost == nil {
			p.fnCost = map[string]float64{}
		}
		p.fnCost[fp.Name] = c + n*fp.RequestsPerSec*3600/1e6*pricePerMillionReqs
		p.Cost.Functions += c
		reqs += n * fp.RequestsPerSec
	}
	p.Cost.Requests = reqs * 3600 / 1e6 * pricePerMillionReqs
	nodes := math.Max(p.SpannerPU, float64(p.Deployment.Spanner.ProcessingUnits)) / 1000
	p.Cost.Spanner = nodes * priceSpannerNodeHour
	var bt float64
	for _, c := range p.Deployment.Bigtable {
		bt += math.Max(float64(c.MinNodes), math.Ceil(p.BigtableNodes))
	}
	p.Cost.Bigtable = bt * priceBigtableNodeHour
	p.Cost.PubSub = p.PubSubBilledPerSec * 3600 / (1 << 40) * pricePubSubTiB
	p.prices()
}
