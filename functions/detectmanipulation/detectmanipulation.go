// Package detectmanipulationfn is the DetectManipulation function (POST
// /internal/detect-manipulation, called hourly by Cloud Scheduler with OIDC;
// locally the same route runs it now). It reads the reactions that changed
// since its watermark, step by step, finds accounts that react as a
// coordinated group (moderation.Params.Detect) and flags them with reason
// "automatic" and the group's evidence; their reactions stop counting by the
// next reconciliation, as for a moderator's flag. Each step's flags and the
// watermark's move commit together, so a run killed midway repeats its step
// and flags nobody twice; a run that finds the watermark moved by another
// leaves. An account a moderator decided on, either way, is never flagged by
// the job.
package detectmanipulationfn

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func init() {
	host.RegisterHTTP("DetectManipulation", host.NeedSpanner,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			db := spannerdb.Wrap(c.Spanner, c.Config)
			flags := moderationstore.New(db, moderationstore.Gate{}).ProtectUnflags(c.Config.Moderation.UnflagProtection)
			return New(Deps{Store: Stores(reactionstore.New(db), flags)}), nil
		})
}

// Job names the watermark of this job (JobWatermarks).
const Job = "detect-manipulation"

// Store reads changed reactions and first-seen times, and records flags
// with the watermark.
type Store interface {
	Watermark(ctx context.Context, job string) (time.Time, error)
	Changed(ctx context.Context, from, to time.Time, maxRows int) ([]moderation.Reaction, error)
	FirstSeen(ctx context.Context, users []string) (map[string]time.Time, error)
	FlagGroups(ctx context.Context, groups []moderation.Group, job string, from, to time.Time) (int, error)
}

// Stores is the Store over the reactions' store (the changes read) and
// moderation's (the flags and the watermark written).
func Stores(reactions *reactionstore.Store, flags *moderationstore.Store) Store {
	return stores{reactions, flags}
}

type stores struct {
	*reactionstore.Store
	flags *moderationstore.Store
}

func (s stores) Watermark(ctx context.Context, job string) (time.Time, error) {
	return s.flags.Watermark(ctx, job)
}

func (s stores) FlagGroups(ctx context.Context, groups []moderation.Group, job string, from, to time.Time) (int, error) {
	return s.flags.FlagGroups(ctx, groups, job, from, to)
}

// Deps are the handler's collaborators and settings; zero values take the
// defaults.
type Deps struct {
	Store  Store
	Params moderation.Params // default moderation.DefaultParams
	// Step is the most reaction time one detection reads beyond the
	// watermark, plus 2·Params.Window before it: groups still acting
	// within Window of a step's end are left to the next step, which then
	// reads them whole (see settled). Default one hour.
	Step time.Duration
	// MaxRows bounds the reactions one detection holds (memory); a step
	// holding more is halved, down to MinStep. Default 1,000,000.
	MaxRows int
	// MinStep is the shortest step (default one minute): a minute holding
	// more than MaxRows reactions is skipped, logged as an error.
	MinStep time.Duration
	// Settle keeps the newest reactions for the next run (default 10 s).
	Settle time.Duration
	// FirstLookback is what the first run ever reads (default one hour).
	FirstLookback time.Duration
	// Timeout bounds a run; a run that catches up on a backlog stops
	// taking up steps a margin before it (default 9 minutes).
	Timeout time.Duration
	Now     func() time.Time
}

type handler struct{ Deps }

// DefaultTimeout bounds a run when Deps leaves Timeout unset, as deployed.
const DefaultTimeout = 9 * time.Minute

// New builds the handler.
func New(d Deps) http.Handler {
	if d.Params == (moderation.Params{}) {
		d.Params = moderation.DefaultParams
	}
	if d.Step <= 0 {
		d.Step = time.Hour
	}
	if d.MaxRows <= 0 {
		d.MaxRows = 1_000_000
	}
	if d.MinStep <= 0 {
		d.MinStep = time.Minute
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

// Report is the answer: what the run read and flagged.
type Report struct {
	From      time.Time `json:"from"` // the watermark the run started at
	To        time.Time `json:"to"`   // the watermark it left
	Steps     int       `json:"steps"`
	Reactions int       `json:"reactions"`
	Groups    int       `json:"groups"`
	Flagged   int       `json:"flagged"` // accounts newly flagged
	// SkippedSteps: minutes holding more than MaxRows reactions, not read.
	SkippedSteps int `json:"skippedSteps,omitempty"`
	// Deferred: groups still acting within Params.Window of a step's end,
	// left to the next step (or run), which reads them whole.
	Deferred int `json:"deferred,omitempty"`
	// Superseded: another run moved the watermark; this one stopped.
	Superseded bool                  `json:"superseded,omitempty"`
	Stats      moderation.Stats      `json:"stats"`
	Evidence   []moderation.Evidence `json:"evidence,omitempty"`
}

func (h *handler) run(ctx context.Context, _ struct{}) (Report, error) {
	started := h.Now()
	until := started.Add(h.Timeout - min(30*time.Second, h.Timeout/4))
	end := started.Add(-h.Settle)
	stored, err := h.Store.Watermark(ctx, Job)
	if err != nil {
		return Report{}, err
	}
	mark := stored
	if mark.IsZero() {
		mark = end.Add(-h.FirstLookback)
	}
	rep := Report{From: mark, To: mark}
	step := h.Step
	for mark.Before(end) && h.Now().Before(until) {
		to := mark.Add(step)
		if to.After(end) {
			to = end
		}
		rows, err := h.Store.Changed(ctx, mark.Add(-2*h.Params.Window), to, h.MaxRows)
		if errors.Is(err, reactionstore.ErrTooManyRows) {
			if step > h.MinStep {
				step = max(step/2, h.MinStep)
				continue
			}
			// Not even a minute fits: leave it unread rather than stop
			// the job for good.
			slog.ErrorContext(ctx, "detect-manipulation: a step holds more reactions than MaxRows; skipped",
				"from", mark, "to", to, "maxRows", h.MaxRows)
			rep.SkippedSteps++
			rows = nil
		} else if err != nil {
			return Report{}, err
		}
		groups, st, err := h.Params.Detect(rows, func(users []string) (map[string]time.Time, error) {
			return h.Store.FirstSeen(ctx, users)
		})
		if err != nil {
			return Report{}, err
		}
		groups, deferred := settled(groups, mark.Add(-h.Params.Window), to.Add(-h.Params.Window))
		rep.Deferred += deferred
		n, err := h.Store.FlagGroups(ctx, groups, Job, stored, to)
		if errors.Is(err, moderationstore.ErrWatermarkMoved) {
			slog.WarnContext(ctx, "detect-manipulation: another run moved the watermark; leaving", "watermark", stored)
			rep.Superseded = true
			break
		}
		if err != nil {
			return Report{}, err
		}
		rep.Steps++
		rep.Reactions += len(rows)
		rep.Groups += len(groups)
		rep.Flagged += n
		rep.Stats = addStats(rep.Stats, st)
		for _, g := range groups {
			if len(rep.Evidence) < maxReported {
				rep.Evidence = append(rep.Evidence, g.Evidence)
			}
			slog.InfoContext(ctx, "detect-manipulation: group flagged", "groupSize", g.Evidence.GroupSize,
				"youngAccounts", g.Evidence.YoungAccounts, "items", len(g.Evidence.Items),
				"windowStart", g.Evidence.WindowStart, "windowEnd", g.Evidence.WindowEnd)
		}
		stored, mark, rep.To = to, to, to
		step = h.Step
	}
	// One line per run: what it read and flagged, and how far behind it is.
	slog.InfoContext(ctx, "detect-manipulation: done", "steps", rep.Steps, "reactions", rep.Reactions,
		"groups", rep.Groups, "flagged", rep.Flagged, "skippedSteps", rep.SkippedSteps,
		"lagSeconds", end.Sub(rep.To).Seconds(), "duration", h.Now().Sub(started).String())
	return rep, nil
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

func addStats(a, b moderation.Stats) moderation.Stats {
	a.Reactions += b.Reactions
	a.Accounts += b.Accounts
	a.Items += b.Items
	a.Eligible += b.Eligible
	a.StrongPairs += b.StrongPairs
	a.Clusters += b.Clusters
	a.Skipped += b.Skipped
	a.Candidates += b.Candidates
	a.Groups += b.Groups
	a.Established += b.Established
	a.Flagged += b.Flagged
	return a
}
