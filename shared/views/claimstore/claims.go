// Package claimstore claims each view of a video by a user for exactly one
// batch of watches, in cells of the user's watch_latest row of the video. It
// stands apart from viewstore so that what reads and folds the staged views
// (the rollup) holds no grant on the history tables.
package claimstore

import (
	"context"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
)

// colClaim is the watch_latest column whose cells are the user's counted
// views of the video (the views' claims): one cell per view, its timestamp
// the receipt of the watch that counted (so the family's GC max age counts
// from it), its value the batch that owns the view. A claim is written once,
// by a conditional mutation, and never deleted with the history: views are
// not taken back by a history deletion.
const colClaim = "view"

// colOldClaims matches the claims written before views counted in a rolling
// window ("w" + an epoch-aligned window's start, or "c" + a watch time),
// timestamped at their claim: a watch within a window of one of them does
// not count, so the change of rule adds no view. They age out with the
// family's GC.
const colOldClaims = `[wc][0-9]+`

// claimConcurrency bounds the conditional writes one Claim has in flight.
const claimConcurrency = 16

// Claims records which batch counts each view of a video by a user, in the
// video's watch_latest row of the user. A watch is a view only if no view
// of the video by the user was counted less than the viewing window before
// or after it (by receipt time): the window rolls with each view, so no
// boundary lets two watches seconds apart count twice. Its client is the
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

// Claim records batchID as the batch that counts each watch of ws that no
// view of the same (user, video) within the viewing window already counts,
// and returns the views that belong to batchID. A watch dated more than a
// window before its receipt is no view and claims nothing
// (history.CountsAsView); a batch's watches of one (user, video) are
// claimed in order of receipt, so they are judged as if they came one by
// one. Each claim is one atomic check-and-mutate of the video's
// watch_latest row ("no claim within the window of this receipt, then
// claim it"), so whatever the timing of batches carrying watches of one
// (user, video), their counted views are a window apart; a batch owns the
// same views on every delivery (its own claim is the one within the
// window, found by its receipt time and batch id).
func (h *Claims) Claim(ctx context.Context, batchID string, ws []history.Watch) (Claimed, error) {
	ws = h.uniqueViews(ws)
	rows := map[string][]int{} // a row's watches, by receipt
	var order []string
	for i, w := range ws {
		k := history.LatestKey(w.UserID, w.VideoID)
		if rows[k] == nil {
			order = append(order, k)
		}
		rows[k] = append(rows[k], i)
	}
	taken := make([]bool, len(ws)) // a claim within the window existed
	var g errgroup.Group
	g.SetLimit(claimConcurrency)
	for _, k := range order {
		idx := rows[k]
		slices.SortStableFunc(idx, func(a, b int) int { return ws[a].AcceptedAt().Compare(ws[b].AcceptedAt()) })
		g.Go(func() error {
			for _, i := range idx {
				matched, err := h.claimOne(ctx, k, batchID, ws[i])
				if err != nil {
					return errs.Backend("claim view", err)
				}
				taken[i] = matched
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Claimed{}, err
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
		if owners[claimKey(w)] == batchID {
			c.Owned = append(c.Owned, w)
		}
	}
	return c, nil
}

// claimOne claims w's view for batchID unless a claim of the row lies less
// than a window from w's receipt; matched reports such a claim (the
// batch's own on a redelivery, or another's).
func (h *Claims) claimOne(ctx context.Context, row, batchID string, w history.Watch) (matched bool, err error) {
	at := claimTime(w)
	set := bigtable.NewMutation()
	set.Set(historystore.LatestFamily, colClaim, at, []byte(batchID))
	near := bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+historystore.LatestFamily+"$"),
		bigtable.ColumnFilter("^("+colClaim+"|"+colOldClaims+")$"),
		bigtable.TimestampRangeFilterMicros(at-h.windowMicros()+1000, at+h.windowMicros()))
	err = h.latest.Apply(ctx, row, bigtable.NewCondMutation(near, nil, set), bigtable.GetCondMutationResult(&matched))
	return matched, err
}

// windowMicros is the viewing window in Bigtable's timestamp unit, whole
// milliseconds (at least one).
func (h *Claims) windowMicros() bigtable.Timestamp {
	return bigtable.Timestamp(max(h.window.Milliseconds(), 1) * 1000)
}

// claimTime is the timestamp of w's claim: its receipt, to the
// millisecond (Bigtable's granularity).
func claimTime(w history.Watch) bigtable.Timestamp {
	return bigtable.Time(w.AcceptedAt()).TruncateToMilliseconds()
}

// claimKey names the claim w's view would have: its row and timestamp.
func claimKey(w history.Watch) string {
	return history.LatestKey(w.UserID, w.VideoID) + "\x00" + time.UnixMicro(int64(claimTime(w))).UTC().Format(time.RFC3339Nano)
}

// claimOwners reads the batch that owns each claim of ws, in one read of
// their rows' claims over the span of their receipts.
func (h *Claims) claimOwners(ctx context.Context, ws []history.Watch) (map[string]string, error) {
	var rows bigtable.RowList
	seenRow := map[string]bool{}
	first, last := claimTime(ws[0]), claimTime(ws[0])
	for _, w := range ws {
		k := history.LatestKey(w.UserID, w.VideoID)
		if !seenRow[k] {
			seenRow[k] = true
			rows = append(rows, k)
		}
		first, last = min(first, claimTime(w)), max(last, claimTime(w))
	}
	filter := bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+historystore.LatestFamily+"$"),
		bigtable.ColumnFilter("^"+colClaim+"$"),
		bigtable.TimestampRangeFilterMicros(first, last+1000))
	owners := map[string]string{}
	err := h.latest.ReadRows(ctx, rows, func(r bigtable.Row) bool {
		for _, item := range r[historystore.LatestFamily] {
			at := time.UnixMicro(int64(item.Timestamp)).UTC().Format(time.RFC3339Nano)
			owners[r.Key()+"\x00"+at] = string(item.Value)
		}
		return true
	}, bigtable.RowFilter(filter))
	if err != nil {
		return nil, errs.Backend("read view claims", err)
	}
	return owners, nil
}

// uniqueViews keeps, in batch order, the first watch of each (user, video,
// receipt) that may count: a client's retry can join the batch its first
// attempt is waiting in, and a backdated watch counts none.
func (h *Claims) uniqueViews(ws []history.Watch) []history.Watch {
	seen := make(map[string]bool, len(ws))
	out := make([]history.Watch, 0, len(ws))
	for _, w := range ws {
		if !history.CountsAsView(w, h.window) {
			continue
		}
		if k := claimKey(w); !seen[k] {
			seen[k] = true
			out = append(out, w)
		}
	}
	return out
}
