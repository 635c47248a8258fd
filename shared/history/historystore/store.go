// Package historystore is the storage of watch history: the entries and
// the latest-watch rows in Bigtable (Store), and the users' history
// settings in Firestore (Settings). The views' claims share the
// latest-watch rows (claimstore.Claims).
package historystore

import (
	"context"
	"encoding/binary"
	"maps"
	"math"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
)

// Table and column names, as in shared/topology/topology.json.
const (
	EntriesTable  = "watch_history"
	entriesFamily = "e"
	colVideo      = "v"
	colPosition   = "p"
	LatestTable   = "watch_latest"
	// LatestFamily holds a row's watch times and deletion marks, and the
	// views' claims (claimstore.Claims), which history's reads and deletions
	// leave alone.
	LatestFamily   = "l"
	colLatestTimes = "t"
	// colDeletedBefore records a deletion of the video's watches: the cell
	// timestamp is when the user deleted, the value (8 bytes, big-endian
	// Unix milliseconds; empty for "all") the bound of the watch times
	// deleted. A watch accepted before the deletion and within the bound is
	// removed when it arrives late, so a deleted video does not come back.
	colDeletedBefore = "d"
	// PendingFamily holds the deletion marks of videos the user had no row
	// of when deleting: a watch of it accepted before the deletion may still
	// be on its way. Such a mark is only needed while an accepted watch can
	// still arrive, so the family's GC (topology.json) drops it after the
	// longest a message can wait in a subscription and then in its
	// dead-letter subscription, not after the history's years.
	PendingFamily = "x"
)

// Store is the watch-history store.
//
// Each watch is a row of watch_history keyed so that a user's newest watch
// comes first. watch_latest keeps, per user and video, one cell version per
// recorded watch time; applying a watch adds its entry and its version, then
// removes every entry but the newest. Any order of concurrent or repeated
// applications converges on one entry per video, at its latest watch: the
// last writer to read the versions sees them all.
type Store struct {
	entries *bigtable.Table
	latest  *bigtable.Table
}

// New uses the tables of client c.
func New(c *bigtable.Client) *Store {
	return &Store{entries: c.Open(EntriesTable), latest: c.Open(LatestTable)}
}

func unavailable(op string, err error) error { return errs.Backend(op, err) }

func cellTime(t time.Time) bigtable.Timestamp { return bigtable.Time(t).TruncateToMilliseconds() }

// Apply records one watch; applying it again changes nothing.
func (h *Store) Apply(ctx context.Context, w history.Watch) error {
	// A watch is its millisecond, the resolution of cell timestamps: the
	// rewatch and delete paths rebuild this row's key from its timestamp.
	w.WatchedAt = w.WatchedAt.UTC().Truncate(time.Millisecond)
	if err := h.write(ctx, w); err != nil {
		return err
	}
	return h.dropOlder(ctx, w)
}

// write adds the watch's entry and its mark: the first half of Apply.
func (h *Store) write(ctx context.Context, w history.Watch) error {
	ts := cellTime(w.WatchedAt)
	entry := bigtable.NewMutation()
	entry.Set(entriesFamily, colVideo, ts, []byte(w.VideoID))
	entry.Set(entriesFamily, colPosition, ts, binary.BigEndian.AppendUint64(nil, math.Float64bits(w.PositionSeconds)))
	if err := h.entries.Apply(ctx, history.EntryKey(w.UserID, w.WatchedAt, w.VideoID), entry); err != nil {
		return unavailable("write history entry", err)
	}
	// The mark's value is when the watch was accepted: another watch of
	// the video applied meanwhile tells by it whether a deletion covers
	// this one, which then is no newer watch to give way to.
	latestKey := history.LatestKey(w.UserID, w.VideoID)
	mark := bigtable.NewMutation()
	mark.Set(LatestFamily, colLatestTimes, ts, msValue(w.AcceptedAt()))
	if err := h.latest.Apply(ctx, latestKey, mark); err != nil {
		return unavailable("write latest watch", err)
	}
	return nil
}

// msValue is a cell value holding t as 8 bytes, big-endian Unix milliseconds.
func msValue(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixMilli())) }

// valueMs reads a value written by msValue; ok is false for any other value.
func valueMs(b []byte) (t time.Time, ok bool) {
	if len(b) != 8 {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b))).UTC(), true
}

// deletion is one recorded deletion of a video's watches.
type deletion struct {
	at     time.Time // when the user deleted
	before time.Time // the watch times deleted are before this; zero: all
}

// covers reports whether the deletion removed w (accepted before it).
func (d deletion) covers(w history.Watch) bool {
	return w.AcceptedAt().Before(d.at) && (d.before.IsZero() || w.WatchedAt.Before(d.before))
}

// dropOlder removes every entry of the video but the newest, and their marks.
// The watch just applied (at own) is removed too when a newer one exists,
// even if its mark is gone: a duplicate delivery can rewrite its entry after
// another application deleted the entry and before it deleted the mark, and
// then nobody else would see that entry again.
//
// A watch covered by a deletion of the video or a clear of the history is
// removed as well, and is no newer watch for the others: it was in flight
// when the user deleted, and a watch accepted after the deletion must not
// give way to it, even while that watch's own application has written its
// entry and not yet removed it.
func (h *Store) dropOlder(ctx context.Context, w history.Watch) error {
	userID, videoID, own := w.UserID, w.VideoID, w.WatchedAt
	marks, deletions, err := h.watchTimes(ctx, userID, videoID)
	if err != nil {
		return err
	}
	covered := func(m watchMark) bool {
		if m.at.Equal(own) {
			// This watch, as this delivery knows it: a watch recorded again
			// after a deletion is history again.
			m.accepted = w.AcceptedAt()
		} else if m.accepted.IsZero() {
			return false // acceptance unknown: a mark written before marks held it
		}
		return slices.ContainsFunc(deletions, func(d deletion) bool {
			return d.covers(history.Watch{WatchedAt: m.at, RecordedAt: m.accepted})
		})
	}
	ownCovered := covered(watchMark{at: own})
	newest := own
	if ownCovered {
		newest = time.Time{}
	}
	var stale []time.Time
	for _, m := range marks {
		switch {
		case covered(m):
			stale = append(stale, m.at)
		case m.at.After(newest):
			newest = m.at
		}
	}
	for _, m := range marks {
		if m.at.Before(newest) && !slices.ContainsFunc(stale, m.at.Equal) {
			stale = append(stale, m.at)
		}
	}
	if (own.Before(newest) || ownCovered) && !slices.ContainsFunc(stale, own.Equal) {
		stale = append(stale, own)
	}
	if len(stale) == 0 {
		return nil
	}
	return h.deleteWatches(ctx, userID, map[string][]time.Time{videoID: stale})
}

// historyKey is the watch_latest row of a user's whole history: no video id
// is empty, so it is no video's row. It holds the clears of the history.
func historyKey(userID string) string { return history.LatestKey(userID, "") }

// watchMark is one recorded watch time of a user's video, with when the
// watch was accepted (zero when its mark does not say).
type watchMark struct{ at, accepted time.Time }

// watchTimes lists the recorded watches of a user's video and the recorded
// deletions that apply to it: the video's and the clears of the history.
func (h *Store) watchTimes(ctx context.Context, userID, videoID string) (marks []watchMark, deletions []deletion, err error) {
	rows := bigtable.RowList{history.LatestKey(userID, videoID), historyKey(userID)}
	err = h.latest.ReadRows(ctx, rows, func(row bigtable.Row) bool {
		for _, item := range append(row[LatestFamily], row[PendingFamily]...) {
			t := item.Timestamp.Time().UTC()
			switch item.Column {
			case LatestFamily + ":" + colLatestTimes:
				accepted, _ := valueMs(item.Value)
				marks = append(marks, watchMark{at: t, accepted: accepted})
			case LatestFamily + ":" + colDeletedBefore, PendingFamily + ":" + colDeletedBefore:
				before, _ := valueMs(item.Value)
				deletions = append(deletions, deletion{at: t, before: before})
			}
		}
		return true
	}, bigtable.RowFilter(bigtable.ColumnFilter("^("+colLatestTimes+"|"+colDeletedBefore+")$"))) // not the claims
	if err != nil {
		return nil, nil, unavailable("read latest watch", err)
	}
	return marks, deletions, nil
}

// markDeleted records, before the watches go, that the user deleted the
// videos' watches (before the bound; zero: all of them) now, in the family
// (LatestFamily, or PendingFamily for videos with no row).
func (h *Store) markDeleted(ctx context.Context, userID string, videos []string, before time.Time, family string) error {
	var value []byte
	if !before.IsZero() {
		// Rounded up: every watch the scan deleted (before "before") is
		// before the bound.
		b := before.Truncate(time.Millisecond)
		if b.Before(before) {
			b = b.Add(time.Millisecond)
		}
		value = msValue(b)
	}
	// One millisecond on, so that a watch accepted in the same millisecond
	// as the deletion counts as accepted before it.
	at := cellTime(time.Now()) + 1000
	keys := make([]string, 0, len(videos))
	muts := make([]*bigtable.Mutation, 0, len(videos))
	for _, v := range videos {
		m := bigtable.NewMutation()
		m.Set(family, colDeletedBefore, at, value)
		keys = append(keys, history.LatestKey(userID, v))
		muts = append(muts, m)
	}
	return applyBulk(ctx, h.latest, keys, muts)
}

// deleteWatches deletes the user's entries of each video at the given
// times, then their marks: two bulk writes whatever the number of videos.
// The marks go last, so that a failure leaves them for a retry to find.
func (h *Store) deleteWatches(ctx context.Context, userID string, byVideo map[string][]time.Time) error {
	var (
		entryKeys, latestKeys []string
		entryMuts, latestMuts []*bigtable.Mutation
	)
	for video, times := range byVideo {
		if len(times) == 0 {
			continue
		}
		mark := bigtable.NewMutation()
		for _, t := range times {
			del := bigtable.NewMutation()
			del.DeleteRow()
			entryKeys = append(entryKeys, history.EntryKey(userID, t, video))
			entryMuts = append(entryMuts, del)
			ts := cellTime(t)
			mark.DeleteTimestampRange(LatestFamily, colLatestTimes, ts, ts+1000)
		}
		latestKeys = append(latestKeys, history.LatestKey(userID, video))
		latestMuts = append(latestMuts, mark)
	}
	if err := applyBulk(ctx, h.entries, entryKeys, entryMuts); err != nil {
		return err
	}
	return applyBulk(ctx, h.latest, latestKeys, latestMuts)
}

func applyBulk(ctx context.Context, t *bigtable.Table, keys []string, muts []*bigtable.Mutation) error {
	const chunk = 1000
	for len(keys) > 0 {
		n := min(chunk, len(keys))
		errs, err := t.ApplyBulk(ctx, keys[:n], muts[:n])
		if err != nil {
			return unavailable("bulk delete", err)
		}
		for _, e := range errs {
			if e != nil {
				return unavailable("bulk delete", e)
			}
		}
		keys, muts = keys[n:], muts[n:]
	}
	return nil
}

// List reads up to size entries of the user, newest first, starting after
// the cursor (nil: from the newest) and never older than the horizon (zero:
// no horizon). It is one prefix scan with a row limit.
func (h *Store) List(ctx context.Context, userID string, after *history.Cursor, horizon time.Time, size int) (history.Page, error) {
	start := history.UserPrefix(userID)
	if after != nil {
		start = after.StartKey(userID)
	}
	end := history.UserEnd(userID)
	if !horizon.IsZero() {
		end = history.HorizonKey(userID, horizon)
	}
	rr := bigtable.NewRange(start, end)
	var (
		page    history.Page
		seen    = map[string]bool{}
		lastKey string
		rows    int
	)
	// One row more than asked tells whether there is a next page.
	err := h.entries.ReadRows(ctx, rr, func(r bigtable.Row) bool {
		rows++
		if rows > size {
			return false
		}
		lastKey = r.Key()
		at, video, err := history.ParseEntryKey(userID, r.Key())
		if err != nil || seen[video] {
			// A duplicate is an older watch whose removal is still under
			// way; the newer one has been listed.
			return true
		}
		seen[video] = true
		page.Entries = append(page.Entries, history.Entry{VideoID: video, WatchedAt: at, PositionSeconds: position(r)})
		return true
	}, bigtable.LimitRows(int64(size+1)), bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		return history.Page{}, unavailable("read history", err)
	}
	if rows > size && lastKey != "" {
		at, video, err := history.ParseEntryKey(userID, lastKey)
		if err == nil {
			page.Next = &history.Cursor{At: at, VideoID: video}
		}
	}
	return page, nil
}

func position(r bigtable.Row) float64 {
	for _, item := range r[entriesFamily] {
		if item.Column == entriesFamily+":"+colPosition && len(item.Value) == 8 {
			return math.Float64frombits(binary.BigEndian.Uint64(item.Value))
		}
	}
	return 0
}

// DeleteVideo removes a video from the user's history, and every watch of
// it accepted up to now, including one still in flight. A video the user
// has no row of (never watched, or no watch of it applied or claimed yet)
// gets its mark in PendingFamily, which outlives the in-flight watches and
// not the history: a mark kept as long as the history for any id asked
// would let a caller fill the table with marks.
func (h *Store) DeleteVideo(ctx context.Context, userID, videoID string) error {
	known, err := h.hasVideo(ctx, userID, videoID)
	if err != nil {
		return err
	}
	family := LatestFamily
	if !known {
		family = PendingFamily
	}
	if err := h.markDeleted(ctx, userID, []string{videoID}, time.Time{}, family); err != nil {
		return err
	}
	// A watch applied since hasVideo read nothing has no deletion to see:
	// it is found here.
	marks, _, err := h.watchTimes(ctx, userID, videoID)
	if err != nil {
		return err
	}
	times := make([]time.Time, len(marks))
	for i, m := range marks {
		times[i] = m.at
	}
	return h.deleteWatches(ctx, userID, map[string][]time.Time{videoID: times})
}

// hasVideo reports whether the user's latest-watch row of the video holds
// anything of LatestFamily: a watch's mark or claim, or an earlier deletion.
func (h *Store) hasVideo(ctx context.Context, userID, videoID string) (bool, error) {
	row, err := h.latest.ReadRow(ctx, history.LatestKey(userID, videoID),
		bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("^"+LatestFamily+"$"),
			bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())))
	if err != nil {
		return false, unavailable("read latest watch", err)
	}
	return len(row) > 0, nil
}

// DeleteBefore removes the user's watches before t, or all of them when t is zero.
func (h *Store) DeleteBefore(ctx context.Context, userID string, before time.Time) error {
	// The clear is recorded for the whole history first, so that a watch
	// in flight is removed when it arrives even if its video has no entry
	// now (none applied yet, or all deleted before).
	if err := h.markDeleted(ctx, userID, []string{""}, before, LatestFamily); err != nil { // "": historyKey
		return err
	}
	_, err := h.deleteOlder(ctx, userID, before, 0, func(byVideo map[string][]time.Time) error {
		return h.markDeleted(ctx, userID, slices.Collect(maps.Keys(byVideo)), before, LatestFamily)
	})
	return err
}

// Expire removes the user's watches before the horizon (the user's
// auto-delete) and reports how many entries it removed. It records no
// deletion: a watch before the horizon that arrives later is hidden by the
// reads' horizon and removed by the next Expire. The claims stay, as with
// every deletion: a watch is a view once, ever. When nothing is older than
// the horizon it costs one ReadRows request that returns no row.
func (h *Store) Expire(ctx context.Context, userID string, horizon time.Time) (int, error) {
	if horizon.IsZero() {
		return 0, nil
	}
	return h.deleteOlder(ctx, userID, horizon, 0, nil)
}

// deleteBatch is how many entries deleteOlder reads and deletes at a time.
const deleteBatch = 1000

// deleteOlder deletes the user's entries before the bound (zero: all), a
// thousand at a time, calling first (when not nil) with each thousand's
// watch times by video before they go. It stops once it has deleted at
// least most (0: no bound) and returns how many it deleted.
func (h *Store) deleteOlder(ctx context.Context, userID string, before time.Time, most int, first func(byVideo map[string][]time.Time) error) (int, error) {
	start := history.UserPrefix(userID)
	if !before.IsZero() {
		start = history.BeforeKey(userID, before)
	}
	rr := bigtable.NewRange(start, history.UserEnd(userID))
	deleted := 0
	for {
		var keys []string
		byVideo := map[string][]time.Time{}
		err := h.entries.ReadRows(ctx, rr, func(r bigtable.Row) bool {
			at, video, err := history.ParseEntryKey(userID, r.Key())
			if err == nil {
				keys = append(keys, r.Key())
				byVideo[video] = append(byVideo[video], at)
			}
			return true
		}, bigtable.LimitRows(deleteBatch), bigtable.RowFilter(bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())))
		if err != nil {
			return deleted, unavailable("read history", err)
		}
		if len(keys) == 0 {
			return deleted, nil
		}
		if first != nil {
			if err := first(byVideo); err != nil {
				return deleted, err
			}
		}
		if err := h.deleteWatches(ctx, userID, byVideo); err != nil {
			return deleted, err
		}
		deleted += len(keys)
		if len(keys) < deleteBatch || most > 0 && deleted >= most {
			return deleted, nil
		}
	}
}
