// Package claimstore claims each view (user, video, viewing window) for
// exactly one batch of watches, in a cell of the user's watch_latest row. It
// stands apart from viewstore so that what reads and folds the staged views
// (the rollup) holds no grant on the history tables.
package claimstore

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
)

// colClaimPrefix starts the watch_latest column that records which batch
// first counted a view of the video by the user in a viewing window (the
// view's claim): "w" + the window's start in Unix milliseconds, value the
// batch id, cell timestamp the time of the claim (so the family's GC max age
// counts from it). A claim is written once, by a conditional mutation, and
// never deleted with the history: views are not taken back. (Claims named
// "c" + a watch time, one per watch, were written before views counted per
// window; they age out with the family's GC.)
const colClaimPrefix = "w"

func claimColumn(windowStart time.Time) string {
	return colClaimPrefix + strconv.FormatInt(windowStart.UnixMilli(), 10)
}

// claimConcurrency bounds the conditional writes one Claim has in flight.
const claimConcurrency = 16

// Claims records which batch counts the view of each (user, video, viewing
// window), in the video's watch_latest row of the user. Its client is the
// transactional one (host.Clients.BigtableTx): a claim is a
// check-and-mutate, a single-row transaction, and the claims are read back
// on the same single cluster, so a claim just written is always seen.
type Claims struct {
	latest *bigtable.Table
	window time.Duration
}

// NewClaims uses the watch_latest table of client c and the viewing window
// (config.History.ViewWindow).
func NewClaims(c *bigtable.Client, window time.Duration) *Claims {
	return &Claims{latest: c.Open(historystore.LatestTable), window: window}
}

// Claimed is what a batch owns after Claim.
type Claimed struct {
	// Owned holds one watch per view the batch counts: those it claimed
	// now and those it had claimed on an earlier delivery.
	Owned []history.Watch
	// Fresh are the watches of Owned claimed by this call, not by an
	// earlier delivery of the batch: each view is fresh exactly once
	// (unless a delivery fails between its claims and their use).
	Fresh []history.Watch
}

// Claim records batchID as the batch that counts the view of each (user,
// video, viewing window) of ws, unless a batch already did, and returns the
// views that belong to batchID. A watch dated more than a window before
// its receipt is no view and claims nothing (history.CountsAsView); of the
// batch's watches of one view, the first in batch order stands for it. A
// view claimed by another batch (a replay, or a client's retry in the same
// window, in a new batch) is not returned. Each claim is one atomic
// check-and-mutate of the video's watch_latest row, so whatever the timing
// of two batches carrying one view, exactly one of them owns it; a batch
// owns the same views on every delivery.
func (h *Claims) Claim(ctx context.Context, batchID string, ws []history.Watch) (Claimed, error) {
	ws = h.uniqueViews(ws)
	taken := make([]bool, len(ws)) // the claim existed before this call
	failed := make([]error, len(ws))
	var g errgroup.Group
	g.SetLimit(claimConcurrency)
	for i, w := range ws {
		g.Go(func() error {
			col := h.column(w)
			set := bigtable.NewMutation()
			set.Set(historystore.LatestFamily, col, bigtable.Time(time.Now()).TruncateToMilliseconds(), []byte(batchID))
			cond := bigtable.ChainFilters(bigtable.FamilyFilter("^"+historystore.LatestFamily+"$"), bigtable.ColumnFilter("^"+col+"$"))
			var matched bool
			err := h.latest.Apply(ctx, history.LatestKey(w.UserID, w.VideoID), bigtable.NewCondMutation(cond, nil, set), bigtable.GetCondMutationResult(&matched))
			failed[i], taken[i] = err, matched
			return nil
		})
	}
	g.Wait()
	for _, err := range failed {
		if err != nil {
			return Claimed{}, errs.Backend("claim view", err)
		}
	}
	var c Claimed
	var recheck []history.Watch
	for i, w := range ws {
		if taken[i] {
			recheck = append(recheck, w)
		} else {
			c.Owned = append(c.Owned, w)
			c.Fresh = append(c.Fresh, w)
		}
	}
	if len(recheck) == 0 {
		return c, nil
	}
	owners, err := h.claimOwners(ctx, recheck)
	if err != nil {
		return Claimed{}, err
	}
	for _, w := range recheck {
		if owners[h.claimKey(w)] == batchID {
			c.Owned = append(c.Owned, w)
		}
	}
	return c, nil
}

func (h *Claims) column(w history.Watch) string {
	return claimColumn(history.ViewWindowStart(w, h.window))
}

func (h *Claims) claimKey(w history.Watch) string {
	return history.LatestKey(w.UserID, w.VideoID) + "\x00" + h.column(w)
}

// claimOwners reads the batch that claimed each view, in one read.
func (h *Claims) claimOwners(ctx context.Context, ws []history.Watch) (map[string]string, error) {
	var rows bigtable.RowList
	seenRow := map[string]bool{}
	var cols []string
	for _, w := range ws {
		k := history.LatestKey(w.UserID, w.VideoID)
		if !seenRow[k] {
			seenRow[k] = true
			rows = append(rows, k)
		}
		cols = append(cols, regexp.QuoteMeta(h.column(w)))
	}
	filter := bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+historystore.LatestFamily+"$"),
		bigtable.ColumnFilter("^("+strings.Join(cols, "|")+")$"),
		bigtable.LatestNFilter(1))
	owners := map[string]string{}
	err := h.latest.ReadRows(ctx, rows, func(r bigtable.Row) bool {
		for _, item := range r[historystore.LatestFamily] {
			col := strings.TrimPrefix(item.Column, historystore.LatestFamily+":")
			owners[r.Key()+"\x00"+col] = string(item.Value)
		}
		return true
	}, bigtable.RowFilter(filter))
	if err != nil {
		return nil, errs.Backend("read view claims", err)
	}
	return owners, nil
}

// uniqueViews keeps, in batch order, the first watch of each view (user,
// video, viewing window) that may count: a client's retry or replay can
// join the batch its first attempt is waiting in, and a backdated watch
// counts none.
func (h *Claims) uniqueViews(ws []history.Watch) []history.Watch {
	seen := make(map[string]bool, len(ws))
	out := make([]history.Watch, 0, len(ws))
	for _, w := range ws {
		if !history.CountsAsView(w, h.window) {
			continue
		}
		if k := h.claimKey(w); !seen[k] {
			seen[k] = true
			out = append(out, w)
		}
	}
	return out
}
