// Package detectmanipulationfn is the DetectManipulation function (POST
// /internal/detect-manipulation, called every minute by Cloud Scheduler with
// OIDC; locally the same route runs it now). Detection runs in steps of the
// reactions' change time, each partitioned by item: a partition reads the
// changes of its item parts, keeps the reactions of the items a coordinated
// group could act on, flags for review the items whose reaction rate spiked,
// and stores its share with its watermark in one transaction; once every
// partition has passed a step, the merge's shares each count the item pairs
// of two buckets of partitions (moderation.Params.MergeShare) and keep what
// they found, and once every share has, the merge's last stage finds the
// coordinated groups (moderation.Params.MergeGroups) and flags them with
// reason "automatic" and the group's evidence, moving the merge's watermark
// in the same transaction. Any invocation works any partition and any share
// under its lease, as the reconciliation's slices are worked, so
// invocations that overlap share the work and a killed one leaves its part
// to the next. An account a moderator decided on, either way, is never
// flagged by the job.
package detectmanipulationfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterHTTP("DetectManipulation", host.NeedSpanner,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			d, err := DepsOf(ctx, c)
			if err != nil {
				return nil, err
			}
			return New(d), nil
		})
}

// DepsOf are the deployed function's Deps: its stores, leases and layout
// on c, and the identity provider's records where c's configuration names
// them.
func DepsOf(ctx context.Context, c *host.Clients) (Deps, error) {
	db := spannerdb.Wrap(c.Spanner, c.Config)
	flags := moderationstore.New(db, moderationstore.Gate{}).ProtectUnflags(c.Config.Moderation.UnflagProtection)
	d := Deps{
		Store: Stores(reactionstore.New(db), flags), Leases: leasestore.New(db, nil), Metrics: c.Metrics,
		Partitions: c.Config.Detection.Partitions, MergeBuckets: c.Config.Detection.MergeBuckets,
		MaxCandidates: c.Config.Detection.MaxShareCandidates,
	}
	records, err := auth.AccountRecordsOf(ctx, c.Config)
	if err != nil {
		return Deps{}, err
	}
	if records != nil {
		d.Accounts = records
	}
	return d, nil
}

// Job names the merge's watermark (JobWatermarks); partition i of n is
// PartitionName(n, i).
const Job = "detect-manipulation"

// PartitionName is the watermark and lease name of partition i of n.
func PartitionName(n, i int) string { return fmt.Sprintf("%s/%d/%d", Job, n, i) }

// LayoutName names the layout record (JobWatermarks): which partitions and
// buckets cut which steps (moderation.Layouts).
const LayoutName = Job + "/layout"

const mergeLease = Job + "/merge"

// ShareName is the lease name of share s of the merge.
func ShareName(s int) string { return fmt.Sprintf("%s/share/%d", Job, s) }

// Store reads the partitions' reactions and keeps their shares, the
// watermarks and the flags.
type Store interface {
	Watermarks(ctx context.Context, names []string) (map[string]time.Time, error)
	Layouts(ctx context.Context, name string) (moderation.Layouts, bool, error)
	SwitchLayout(ctx context.Context, name, job string, seen *moderation.Layouts, next moderation.Layout, partition func(n, i int) string, first time.Time) (moderation.Layouts, error)
	ScanParts(ctx context.Context, lo, hi int, from, to time.Time, scan *moderation.Scan) error
	SavePartial(ctx context.Context, layout, name string, partitions, part int, from, to time.Time, p moderation.Partial, spikes []moderation.Spike, baseline time.Duration) error
	Partials(ctx context.Context, stepEnd time.Time, partitions, lo, hi int) ([]moderation.Partial, error)
	PartialHeads(ctx context.Context, stepEnd time.Time, partitions int) ([]moderation.Partial, error)
	HasMergeShare(ctx context.Context, stepEnd time.Time, partitions, buckets, share int) (bool, error)
	SaveMergeShare(ctx context.Context, stepEnd time.Time, partitions, buckets, share int, ps moderation.PairShare) error
	MergeShares(ctx context.Context, stepEnd time.Time, partitions, buckets int) (map[int]moderation.PairShare, error)
	DropPartials(ctx context.Context, stepEnd time.Time, partitions int) error
	FirstSeen(ctx context.Context, users []string) (map[string]time.Time, error)
	FlagGroups(ctx context.Context, groups []moderation.Group, job string, from, to time.Time) (int, error)
}

// Stores is the Store over the reactions' store (the changes read, first
// reactions) and moderation's (the partitions' shares, the watermarks, the
// flags and the spikes' records).
func Stores(reactions *reactionstore.Store, flags *moderationstore.Store) Store {
	return stores{reactions, flags}
}

type stores struct {
	reactions *reactionstore.Store
	*moderationstore.Store
}

func (s stores) ScanParts(ctx context.Context, lo, hi int, from, to time.Time, scan *moderation.Scan) error {
	return s.reactions.ScanParts(ctx, lo, hi, from, to, scan)
}

func (s stores) FirstSeen(ctx context.Context, users []string) (map[string]time.Time, error) {
	return s.reactions.FirstSeen(ctx, users)
}

// Accounts answers when the identity provider created accounts
// (*auth.AccountRecords); an account it leaves out is aged by its first
// reaction.
type Accounts interface {
	Created(ctx context.Context, uids []string) (map[string]time.Time, error)
}

// Leases keep two invocations off one partition, or off the merge, at once
// (*leasestore.Store); correctness rests on the watermarks.
type Leases interface {
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, name, holder string) error
}

// Deps are the handler's collaborators and settings; zero values take the
// defaults.
type Deps struct {
	Store  Store
	Leases Leases // nil: no leases (one invocation at a time)
	// Accounts gives accounts' ages from the identity provider (nil: from
	// their first reactions only).
	Accounts Accounts
	Params   moderation.Params // default moderation.DefaultParams
	// Partitions is how many partitions a step is cut into (default 16).
	Partitions int
	// MergeBuckets is how many buckets of partitions the merge is cut by:
	// MergeBuckets·(MergeBuckets+1)/2 shares, each holding two buckets'
	// candidates (default 4, at most Partitions).
	MergeBuckets int
	// Step is the reaction time one step adds; each step reads 2·Window
	// (at least SpikeBaseline) before it as well. Default 5 minutes.
	Step time.Duration
	// Ahead bounds how many steps the partitions run ahead of the merge
	// (their stored shares). Default 6.
	Ahead int
	// MaxCandidates bounds the candidate reactions one share of a merge
	// holds (memory), judged before it reads them; a step with a share over
	// it is skipped and counted. Default 4,000,000 (about 1.5 GiB).
	MaxCandidates int
	// Workers is how many partitions one invocation works at once
	// (default 4).
	Workers int
	// Settle keeps the newest reactions for the next run (default 10 s).
	Settle time.Duration
	// FirstLookback is what the first run ever reads (default one hour).
	FirstLookback time.Duration
	// Timeout bounds a run; a run stops taking up steps a margin before
	// it (default 9 minutes).
	Timeout time.Duration
	Metrics *telemetry.Metrics // may be nil
	Now     func() time.Time
}

type handler struct{ Deps }

// DefaultTimeout bounds a run when Deps leaves Timeout unset, as deployed.
const DefaultTimeout = 9 * time.Minute

// DefaultMaxCandidates is a merge share's budget of candidates when Deps
// leaves MaxCandidates unset (config's DETECTION_MAX_SHARE_CANDIDATES
// default): about 1.5 GiB at their peak.
const DefaultMaxCandidates = 4_000_000

// DefaultStep is the reaction time a step adds when Deps leaves Step
// unset, as deployed.
const DefaultStep = 5 * time.Minute

// WorkBound is how long a run of the given timeout takes up work: it stops
// taking up steps and shares a margin before its timeout.
func WorkBound(timeout time.Duration) time.Duration {
	return timeout - min(30*time.Second, timeout/4)
}

// Lookback is what a step reads before its start: two windows for the
// groups that straddle it, and the spikes' baseline.
func Lookback(p moderation.Params) time.Duration {
	return max(2*p.Window, p.SpikeBaseline)
}

// partitionLease is how long an invocation holds a partition without
// committing a step; each step renews it.
const partitionLease = 2 * time.Minute

// New builds the handler.
func New(d Deps) http.Handler {
	if d.Params == (moderation.Params{}) {
		d.Params = moderation.DefaultParams
	}
	if d.Partitions <= 0 {
		d.Partitions = 16
	}
	if d.MergeBuckets <= 0 {
		d.MergeBuckets = 4
	}
	d.MergeBuckets = min(d.MergeBuckets, d.Partitions)
	if d.Step <= 0 {
		d.Step = DefaultStep
	}
	if d.Ahead <= 0 {
		d.Ahead = 6
	}
	if d.MaxCandidates <= 0 {
		d.MaxCandidates = DefaultMaxCandidates
	}
	if d.Workers <= 0 {
		d.Workers = 4
	}
	if d.Settle <= 0 {
		d.Settle = 10 * time.Second
	}
	if d.FirstLookback <= 0 {
		d.FirstLookback = time.Hour
	}
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	h := &handler{d}
	return httpx.Job("POST /internal/detect-manipulation", h.Timeout, nil, h.run)
}

// Report is the answer: what the run read, merged and flagged.
type Report struct {
	From time.Time `json:"from"` // the merge's watermark the run started at
	To   time.Time `json:"to"`   // the merge's watermark it left
	// PartitionSteps counts the partitions' steps this run stored, Held
	// the partitions another invocation was working.
	PartitionSteps int `json:"partitionSteps"`
	Held           int `json:"held,omitempty"`
	Steps          int `json:"steps"` // steps merged
	// MergeShares counts the shares of merges this run worked.
	MergeShares int `json:"mergeShares"`
	Reactions   int `json:"reactions"`
	Candidates  int `json:"candidates"`
	Groups      int `json:"groups"`
	Flagged     int `json:"flagged"` // accounts newly flagged
	Spikes      int `json:"spikes"`  // items flagged for review
	// AgesFromProvider and AgesFromReactions: of the groups' members, those
	// aged by the identity provider's record, and those by their first
	// reaction (no record, or no provider).
	AgesFromProvider  int `json:"agesFromProvider,omitempty"`
	AgesFromReactions int `json:"agesFromReactions,omitempty"`
	// SkippedSteps: steps whose candidates exceeded MaxCandidates, not
	// judged; SkippedClusters: clusters over Params.MaxCandidates.
	SkippedSteps    int `json:"skippedSteps,omitempty"`
	SkippedClusters int `json:"skippedClusters,omitempty"`
	// Deferred: groups still acting within Params.Window of a step's end,
	// left to the next step, which reads them whole.
	Deferred int `json:"deferred,omitempty"`
	// Superseded: another invocation merged the step first.
	Superseded bool                  `json:"superseded,omitempty"`
	Evidence   []moderation.Evidence `json:"evidence,omitempty"`
}

// names are the watermarks a run reads: the merge's and the partitions'
// of the layouts in the record (the previous one's while its steps are
// finished).
func names(ls moderation.Layouts) []string {
	out := []string{Job}
	for _, l := range ls.InPlay() {
		for i := range l.Partitions {
			out = append(out, PartitionName(l.Partitions, i))
		}
	}
	return out
}

func (h *handler) lookback() time.Duration { return Lookback(h.Params) }

func (h *handler) run(ctx context.Context, _ struct{}) (Report, error) {
	started := h.Now()
	until := started.Add(WorkBound(h.Timeout))
	end := started.Add(-h.Settle)
	var rep Report
	holder := leasestore.NewHolder()
	first := true
	for h.Now().Before(until) {
		ls, err := h.layouts(ctx, end)
		if err != nil {
			return rep, err
		}
		marks, err := h.Store.Watermarks(ctx, names(ls))
		if err != nil {
			return rep, err
		}
		if first {
			rep.From, rep.To, first = marks[Job], marks[Job], false
		}
		stored, err := h.partitions(ctx, ls, marks, end, until, holder, &rep)
		if err != nil {
			return rep, err
		}
		marks, err = h.Store.Watermarks(ctx, names(ls))
		if err != nil {
			return rep, err
		}
		merged, err := h.merge(ctx, ls, marks, until, holder, &rep)
		if err != nil {
			return rep, err
		}
		if stored == 0 && merged == 0 {
			break
		}
	}
	// One line per run: what it read and flagged, and how far behind it is.
	slog.InfoContext(ctx, "detect-manipulation: done", "partitionSteps", rep.PartitionSteps, "steps", rep.Steps,
		"reactions", rep.Reactions, "candidates", rep.Candidates, "groups", rep.Groups, "flagged", rep.Flagged,
		"spikes", rep.Spikes, "skippedSteps", rep.SkippedSteps, "skippedClusters", rep.SkippedClusters,
		"lagSeconds", end.Sub(rep.To).Seconds(), "duration", h.Now().Sub(started).String())
	return rep, nil
}

// layouts reads the layout record and, when the configured layout is not
// the current one and the steps of the last switch are all merged,
// switches to it: the steps the current layout's partitions have begun are
// finished under it, the later ones cut by the configured layout. The
// first run ever records the configured layout and starts at
// FirstLookback.
func (h *handler) layouts(ctx context.Context, end time.Time) (moderation.Layouts, error) {
	want := moderation.Layout{Partitions: h.Partitions, Buckets: h.MergeBuckets}
	for range 3 {
		ls, ok, err := h.Store.Layouts(ctx, LayoutName)
		if err != nil {
			return ls, err
		}
		if ok && ls.Current == want {
			return ls, nil
		}
		var seen *moderation.Layouts
		if ok {
			marks, err := h.Store.Watermarks(ctx, []string{Job})
			if err != nil {
				return ls, err
			}
			if marks[Job].Before(ls.Since) {
				return ls, nil // the last switch's earlier steps are still being merged
			}
			seen = &ls
		}
		next, err := h.Store.SwitchLayout(ctx, LayoutName, Job, seen, want, PartitionName, end.Add(-h.FirstLookback).Truncate(time.Minute))
		if errors.Is(err, moderationstore.ErrWatermarkMoved) {
			continue // another invocation switched first: read its record
		}
		if err != nil {
			return ls, err
		}
		slog.InfoContext(ctx, "detect-manipulation: layout switched", "layout", next.Current.String(), "previous", next.Previous.String(), "since", next.Since)
		return next, nil
	}
	ls, ok, err := h.Store.Layouts(ctx, LayoutName)
	if err == nil && !ok {
		err = errors.New("detect-manipulation: no layout recorded")
	}
	return ls, err
}

// partitions works the partitions that have a whole step to read, under
// their leases, Workers at a time, and returns how many steps they stored:
// the previous layout's up to the record's Since, the current one's up to
// Ahead steps past the merge.
func (h *handler) partitions(ctx context.Context, ls moderation.Layouts, marks map[string]time.Time, end, until time.Time, holder string, rep *Report) (int, error) {
	ahead := marks[Job].Add(time.Duration(h.Ahead) * h.Step)
	type partition struct {
		l     moderation.Layout
		i     int
		limit time.Time
	}
	var todo []partition
	for _, l := range ls.InPlay() {
		limit := ahead
		if l != ls.Current && ls.Since.Before(limit) {
			limit = ls.Since
		}
		for i := range l.Partitions {
			// A partition without a watermark is none of the record's
			// layouts' (the previous layout of the first run).
			if w, ok := marks[PartitionName(l.Partitions, i)]; ok && !w.Add(h.Step).After(end) && w.Before(limit) {
				todo = append(todo, partition{l, i, limit})
			}
		}
	}
	// Invocations started together spread over the partitions.
	rand.Shuffle(len(todo), func(a, b int) { todo[a], todo[b] = todo[b], todo[a] })
	var mu sync.Mutex
	stored := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(h.Workers)
	for _, p := range todo {
		g.Go(func() error {
			name := PartitionName(p.l.Partitions, p.i)
			if ok, err := h.lease(gctx, name, holder); err != nil || !ok {
				if err == nil {
					mu.Lock()
					rep.Held++
					mu.Unlock()
				}
				return err
			}
			defer h.release(gctx, name, holder)
			// Where the partition is now: another invocation may have
			// stored its step between the read above and the lease.
			now, err := h.Store.Watermarks(gctx, []string{name})
			if err != nil {
				return err
			}
			w := now[name]
			for !w.Add(h.Step).After(end) && w.Before(p.limit) && h.Now().Before(until) {
				spikes, err := h.partitionStep(gctx, p.l, p.i, w)
				if errors.Is(err, moderationstore.ErrWatermarkMoved) {
					return nil // another invocation took the partition over, or the layout moved on
				}
				if err != nil {
					return err
				}
				mu.Lock()
				stored++
				rep.PartitionSteps++
				rep.Spikes += spikes
				mu.Unlock()
				w = w.Add(h.Step)
				if _, err := h.lease(gctx, name, holder); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := g.Wait()
	return stored, err
}

// partitionStep reads partition i's (of layout l) step from `from`, and
// stores its share and spikes with the partition's watermark moved past it.
func (h *handler) partitionStep(ctx context.Context, l moderation.Layout, i int, from time.Time) (int, error) {
	to := from.Add(h.Step)
	lo, hi := moderation.PartRange(i, l.Partitions)
	scan := h.Params.NewScan(from, to)
	if err := h.Store.ScanParts(ctx, lo, hi, from.Add(-h.lookback()), to, scan); err != nil {
		return 0, err
	}
	part, spikes := scan.Finish()
	if err := h.Store.SavePartial(ctx, LayoutName, PartitionName(l.Partitions, i), l.Partitions, i, from, to, part, spikes, h.Params.SpikeBaseline); err != nil {
		return 0, err
	}
	for _, sp := range spikes {
		slog.InfoContext(ctx, "detect-manipulation: reaction rate spike", "contentId", sp.Item.ContentID, "reaction", sp.Item.Reaction,
			"minute", sp.Minute, "reactions", sp.Reactions, "baselinePerMinute", sp.Baseline)
	}
	return len(spikes), nil
}

// merge merges the steps every partition of their layout has stored, each
// in its shares (under their leases) and then its last stage (under the
// merge's lease), and returns how many steps and shares it worked.
func (h *handler) merge(ctx context.Context, ls moderation.Layouts, marks map[string]time.Time, until time.Time, holder string, rep *Report) (int, error) {
	mark := marks[Job]
	worked := 0
	for h.Now().Before(until) {
		l := ls.At(mark)
		var done time.Time
		for i := range l.Partitions {
			if w := marks[PartitionName(l.Partitions, i)]; w.Before(done) || i == 0 {
				done = w
			}
		}
		if mark.Add(h.Step).After(done) {
			return worked, nil
		}
		to := mark.Add(h.Step)
		before := rep.MergeShares
		shares, err := h.shares(ctx, l, to, until, holder, rep)
		worked += rep.MergeShares - before
		if err != nil || shares == nil {
			return worked, err // nil: shares still being worked
		}
		if ok, err := h.lease(ctx, mergeLease, holder); err != nil || !ok {
			return worked, err
		}
		err = h.mergeStep(ctx, l, mark, to, shares, rep)
		h.release(ctx, mergeLease, holder)
		if errors.Is(err, moderationstore.ErrWatermarkMoved) {
			slog.WarnContext(ctx, "detect-manipulation: another run merged the step; leaving", "watermark", mark)
			rep.Superseded = true
			return worked, nil
		}
		if err != nil {
			return worked, err
		}
		worked++
		mark, rep.To = to, to
	}
	return worked, nil
}

// shares works the shares of the merge (cut by l) of the step ending at to
// that no invocation has saved, one at a time (each holds two buckets'
// candidates), under their leases, and returns every share once all are
// saved (nil while some are not).
func (h *handler) shares(ctx context.Context, l moderation.Layout, to, until time.Time, holder string, rep *Report) ([]moderation.PairShare, error) {
	n := moderation.MergeShares(l.Buckets)
	have, err := h.Store.MergeShares(ctx, to, l.Partitions, l.Buckets)
	if err != nil {
		return nil, err
	}
	var todo []int
	for s := range n {
		if _, ok := have[s]; !ok {
			todo = append(todo, s)
		}
	}
	// Invocations started together spread over the shares.
	rand.Shuffle(len(todo), func(a, b int) { todo[a], todo[b] = todo[b], todo[a] })
	others := false // shares left to, or saved by, other invocations
	for _, s := range todo {
		if !h.Now().Before(until) {
			break
		}
		// A step another invocation merged meanwhile has no shares left to
		// count (its rows are dropped).
		marks, err := h.Store.Watermarks(ctx, []string{Job})
		if err != nil {
			return nil, err
		}
		if !marks[Job].Before(to) {
			return nil, nil
		}
		ok, err := h.lease(ctx, ShareName(s), holder)
		if err != nil {
			return nil, err
		}
		if !ok {
			rep.Held++
			others = true
			continue
		}
		// Another invocation may have saved it between the read above and
		// the lease: it is not counted again.
		saved, err := h.Store.HasMergeShare(ctx, to, l.Partitions, l.Buckets, s)
		if err != nil || saved {
			h.release(ctx, ShareName(s), holder)
			if err != nil {
				return nil, err
			}
			others = true
			continue
		}
		ps, err := h.share(ctx, l, to, s)
		h.release(ctx, ShareName(s), holder)
		if err != nil {
			return nil, err
		}
		have[s] = ps
		rep.MergeShares++
	}
	if len(have) < n && others {
		// The shares the others saved meanwhile: the last to finish runs
		// the last stage.
		if have, err = h.Store.MergeShares(ctx, to, l.Partitions, l.Buckets); err != nil {
			return nil, err
		}
	}
	if len(have) < n {
		return nil, nil
	}
	out := make([]moderation.PairShare, n)
	for s := range n {
		out[s] = have[s]
	}
	return out, nil
}

// share counts share s of the merge (cut by l) of the step ending at to
// and saves it.
func (h *handler) share(ctx context.Context, l moderation.Layout, to time.Time, s int) (moderation.PairShare, error) {
	heads, err := h.Store.PartialHeads(ctx, to, l.Partitions)
	if err != nil {
		return moderation.PairShare{}, err
	}
	accounts, err := moderation.StepAccounts(heads)
	if err != nil {
		return moderation.PairShare{}, err
	}
	i, j := moderation.ShareBuckets(s, l.Buckets)
	// The budget is judged on the partitions' counts, before the share
	// reads (holds) a candidate.
	buckets := []int{i}
	if j != i {
		buckets = append(buckets, j)
	}
	held := 0
	for _, b := range buckets {
		lo, hi := moderation.BucketPartitions(b, l.Buckets, l.Partitions)
		for _, p := range heads[lo:hi] {
			held += p.Kept
		}
	}
	if held > h.MaxCandidates {
		ps := moderation.PairShare{Candidates: held, Skipped: true}
		return ps, h.Store.SaveMergeShare(ctx, to, l.Partitions, l.Buckets, s, ps)
	}
	read := func(b int) ([]moderation.Partial, error) {
		lo, hi := moderation.BucketPartitions(b, l.Buckets, l.Partitions)
		return h.Store.Partials(ctx, to, l.Partitions, lo, hi)
	}
	a, err := read(i)
	if err != nil {
		return moderation.PairShare{}, err
	}
	var b []moderation.Partial
	if j != i {
		if b, err = read(j); err != nil {
			return moderation.PairShare{}, err
		}
	}
	ps, err := h.Params.MergeShare(a, b, accounts)
	if err != nil {
		return ps, err
	}
	return ps, h.Store.SaveMergeShare(ctx, to, l.Partitions, l.Buckets, s, ps)
}

// mergeStep is the last stage of the merge of the step [mark, to), cut by
// l: the groups from its shares' pairs, flagged with the merge's watermark
// moved to `to`; a step with a share skipped is left unjudged, and counted.
func (h *handler) mergeStep(ctx context.Context, l moderation.Layout, mark, to time.Time, shares []moderation.PairShare, rep *Report) error {
	heads, err := h.Store.PartialHeads(ctx, to, l.Partitions)
	if err != nil {
		return err
	}
	accounts, err := moderation.StepAccounts(heads)
	if err != nil {
		return err
	}
	rows, candidates, largest, skipped := 0, 0, 0, false
	for _, p := range heads {
		rows += p.Rows
	}
	for s, ps := range shares {
		if i, j := moderation.ShareBuckets(s, l.Buckets); i == j {
			candidates += ps.Candidates // a bucket's own share holds each of its candidates once
		}
		largest = max(largest, ps.Candidates)
		skipped = skipped || ps.Skipped
	}
	var groups []moderation.Group
	if skipped {
		slog.ErrorContext(ctx, "detect-manipulation: skipped", "kind", "step", "from", mark, "to", to,
			"shareCandidates", largest, "maxCandidates", h.MaxCandidates)
		h.Metrics.DetectionSkipped(ctx, "step", 1)
		rep.SkippedSteps++
	} else {
		// The partitions' shares one at a time, so the last stage holds one
		// partition's candidates besides the clusters'.
		each := func(visit func(moderation.Partial) error) error {
			for i := range l.Partitions {
				parts, err := h.Store.Partials(ctx, to, l.Partitions, i, i+1)
				if err != nil {
					return err
				}
				for _, p := range parts {
					if err := visit(p); err != nil {
						return err
					}
				}
			}
			return nil
		}
		var st moderation.Stats
		groups, st, err = h.Params.MergeGroups(shares, accounts, each, h.ages(ctx, rep))
		if err != nil {
			return err
		}
		if st.Skipped > 0 {
			slog.ErrorContext(ctx, "detect-manipulation: skipped", "kind", "cluster", "from", mark, "to", to,
				"clusters", st.Skipped, "maxCandidates", h.Params.MaxCandidates)
			h.Metrics.DetectionSkipped(ctx, "cluster", st.Skipped)
			rep.SkippedClusters += st.Skipped
		}
	}
	groups, deferred := settled(groups, mark.Add(-h.Params.Window), to.Add(-h.Params.Window))
	n, err := h.Store.FlagGroups(ctx, groups, Job, mark, to)
	if err != nil {
		return err
	}
	if err := h.Store.DropPartials(ctx, to, l.Partitions); err != nil {
		// The deletion policy clears them; the step is merged.
		slog.WarnContext(ctx, "detect-manipulation: partials not dropped", "stepEnd", to, "error", err.Error())
	}
	rep.Steps++
	rep.Reactions += rows
	rep.Candidates += candidates
	rep.Groups += len(groups)
	rep.Flagged += n
	rep.Deferred += deferred
	for _, g := range groups {
		if len(rep.Evidence) < maxReported {
			rep.Evidence = append(rep.Evidence, g.Evidence)
		}
		slog.InfoContext(ctx, "detect-manipulation: group flagged", "groupSize", g.Evidence.GroupSize,
			"youngAccounts", g.Evidence.YoungAccounts, "items", len(g.Evidence.Items),
			"windowStart", g.Evidence.WindowStart, "windowEnd", g.Evidence.WindowEnd)
	}
	return nil
}

// ages answers the groups' members' ages: the identity provider's creation
// time where it has one, the first reaction otherwise.
func (h *handler) ages(ctx context.Context, rep *Report) moderation.FirstSeen {
	return func(users []string) (map[string]time.Time, error) {
		out := map[string]time.Time{}
		rest := users
		if h.Accounts != nil {
			created, err := h.Accounts.Created(ctx, users)
			if err != nil {
				slog.WarnContext(ctx, "detect-manipulation: account records unavailable; ages from first reactions", "error", err.Error())
			} else {
				out, rest = created, nil
				for _, u := range users {
					if _, ok := created[u]; !ok {
						rest = append(rest, u)
					}
				}
			}
		}
		first, err := h.Store.FirstSeen(ctx, rest)
		if err != nil {
			return nil, err
		}
		for u, t := range first {
			out[u] = t
		}
		rep.AgesFromProvider += len(users) - len(rest)
		rep.AgesFromReactions += len(rest)
		return out, nil
	}
}

func (h *handler) lease(ctx context.Context, name, holder string) (bool, error) {
	if h.Leases == nil {
		return true, nil
	}
	return h.Leases.Lease(ctx, name, holder, partitionLease)
}

func (h *handler) release(ctx context.Context, name, holder string) {
	if h.Leases == nil {
		return
	}
	if err := h.Leases.Release(context.WithoutCancel(ctx), name, holder); err != nil {
		slog.WarnContext(ctx, "detect-manipulation: lease not released; it expires by itself", "lease", name, "error", err.Error())
	}
}

// settled keeps the groups whose last reaction lies in [from, cut), cut
// being Params.Window before the step's end and from Window before its
// start: a group that acted after cut may still be growing past the step's
// end, so the next step, which reads from 2·Window before its start, finds
// it whole (flagging a partial group would flag it under evidence of part
// of its size); one that ended before from was settled by the step before.
// It returns the groups kept and how many were left to the next step.
func settled(groups []moderation.Group, from, cut time.Time) ([]moderation.Group, int) {
	out := groups[:0]
	deferred := 0
	for _, g := range groups {
		switch end := g.Evidence.WindowEnd; {
		case !end.Before(cut):
			deferred++
		case !end.Before(from):
			out = append(out, g)
		}
	}
	return out, deferred
}

// maxReported bounds the evidence records an answer carries (the flags
// carry them all).
const maxReported = 100
