package historystore

import (
	"context"
	"maps"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/history"
)

// EraseEntries is a step of the account erasure: it records a clear of the
// whole history (so that a watch still in flight removes itself when it
// arrives, as after DELETE /v1/history), then deletes about limit of the
// user's entries (whole batches of the clear's) with their marks. It returns how many it deleted; none
// means none are left.
func (h *Store) EraseEntries(ctx context.Context, userID string, limit int) (int, error) {
	if err := h.markDeleted(ctx, userID, []string{""}, time.Time{}, LatestFamily); err != nil { // "": historyKey
		return 0, err
	}
	return h.deleteOlder(ctx, userID, time.Time{}, limit, func(byVideo map[string][]time.Time) error {
		return h.markDeleted(ctx, userID, slices.Collect(maps.Keys(byVideo)), time.Time{}, LatestFamily)
	})
}

// EraseLatest is the account erasure's last step in Bigtable: it deletes up
// to limit of the user's watch_latest rows — every video's watch times,
// deletions and the views' claims — and returns how many; none means none
// are left. The row of the history's clears stays: it holds the times of the
// user's clears and no video, and a watch accepted before the erasure that
// is delivered later (a dead-lettered batch sent again) needs it to remove
// itself. It ages out with the family's GC.
func (h *Store) EraseLatest(ctx context.Context, userID string, limit int) (int, error) {
	// historyKey(userID) is the user's prefix itself; every video's row is
	// longer, so the range after prefix+"\x00" is every row but it.
	rr := bigtable.NewRange(historyKey(userID)+"\x00", history.UserEnd(userID))
	var keys []string
	var muts []*bigtable.Mutation
	err := h.latest.ReadRows(ctx, rr, func(r bigtable.Row) bool {
		m := bigtable.NewMutation()
		m.DeleteRow()
		keys = append(keys, r.Key())
		muts = append(muts, m)
		return true
	}, bigtable.LimitRows(int64(limit)), bigtable.RowFilter(bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())))
	if err != nil {
		return 0, unavailable("read latest watches", err)
	}
	if err := applyBulk(ctx, h.latest, keys, muts); err != nil {
		return 0, err
	}
	return len(keys), nil
}
