package historystore

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/history"
)

// colClaimPrefix starts the watch_latest column that records which batch
// first recorded a watch (the view's claim): "c" + the watch time in Unix
// milliseconds, value the batch id, cell timestamp the time of the claim
// (so the family's GC max age counts from it). A claim is written once, by
// a conditional mutation, and never deleted with the history: a deleted
// watch sent again is not a new view.
const colClaimPrefix = "c"

func claimColumn(at time.Time) string { return colClaimPrefix + strconv.FormatInt(at.UnixMilli(), 10) }

// claimConcurrency bounds the conditional writes one Claim has in flight.
const claimConcurrency = 16

// Claims records which batch counts each watch, in the watch's
// watch_latest row. Its client is the transactional one
// (host.Clients.BigtableTx): a claim is a check-and-mutate, a
// single-row transaction, and the claims are read back on the same single
// cluster, so a claim just written is always seen.
type Claims struct {
	latest *bigtable.Table
}

// NewClaims uses the watch_latest table of client c.
func NewClaims(c *bigtable.Client) *Claims { return &Claims{latest: c.Open(LatestTable)} }

// Claim records batchID as the batch that counts each watch of ws, unless a
// batch already did, and returns the watches that belong to batchID: those
// it claimed now and those it had claimed on an earlier delivery. A watch
// claimed by another batch (a client's retry of the same watch, sent again
// in a new batch) is not returned. Each claim is one atomic
// check-and-mutate of the watch's watch_latest row, so whatever the timing
// of two batches carrying one watch, exactly one of them owns it; a batch
// owns the same watches on every delivery.
func (h *Claims) Claim(ctx context.Context, batchID string, ws []history.Watch) ([]history.Watch, error) {
	ws = uniqueWatches(ws)
	taken := make([]bool, len(ws)) // the claim existed before this call
	errs := make([]error, len(ws))
	var g errgroup.Group
	g.SetLimit(claimConcurrency)
	for i, w := range ws {
		g.Go(func() error {
			col := claimColumn(w.WatchedAt)
			set := bigtable.NewMutation()
			set.Set(latestFamily, col, cellTime(time.Now()), []byte(batchID))
			cond := bigtable.ChainFilters(bigtable.FamilyFilter("^"+latestFamily+"$"), bigtable.ColumnFilter("^"+col+"$"))
			var matched bool
			err := h.latest.Apply(ctx, history.LatestKey(w.UserID, w.VideoID), bigtable.NewCondMutation(cond, nil, set), bigtable.GetCondMutationResult(&matched))
			errs[i], taken[i] = err, matched
			return nil
		})
	}
	g.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, unavailable("claim watch", err)
		}
	}
	owned := make([]history.Watch, 0, len(ws))
	var recheck []history.Watch
	for i, w := range ws {
		if taken[i] {
			recheck = append(recheck, w)
		} else {
			owned = append(owned, w)
		}
	}
	if len(recheck) == 0 {
		return owned, nil
	}
	owners, err := h.claimOwners(ctx, recheck)
	if err != nil {
		return nil, err
	}
	for _, w := range recheck {
		if owners[claimKey(w)] == batchID {
			owned = append(owned, w)
		}
	}
	return owned, nil
}

func claimKey(w history.Watch) string {
	return history.LatestKey(w.UserID, w.VideoID) + "\x00" + claimColumn(w.WatchedAt)
}

// claimOwners reads the batch that claimed each watch, in one read.
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
		cols = append(cols, regexp.QuoteMeta(claimColumn(w.WatchedAt)))
	}
	filter := bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+latestFamily+"$"),
		bigtable.ColumnFilter("^("+strings.Join(cols, "|")+")$"),
		bigtable.LatestNFilter(1))
	owners := map[string]string{}
	err := h.latest.ReadRows(ctx, rows, func(r bigtable.Row) bool {
		for _, item := range r[latestFamily] {
			col := strings.TrimPrefix(item.Column, latestFamily+":")
			owners[r.Key()+"\x00"+col] = string(item.Value)
		}
		return true
	}, bigtable.RowFilter(filter))
	if err != nil {
		return nil, unavailable("read watch claims", err)
	}
	return owners, nil
}

// uniqueWatches drops repeats of a watch (one event id) within a batch: a
// client's retry can join the batch its first attempt is waiting in.
func uniqueWatches(ws []history.Watch) []history.Watch {
	seen := make(map[string]bool, len(ws))
	out := make([]history.Watch, 0, len(ws))
	for _, w := range ws {
		if !seen[w.EventID] {
			seen[w.EventID] = true
			out = append(out, w)
		}
	}
	return out
}
