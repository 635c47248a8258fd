package historystore

import (
	"context"
	"encoding/binary"
	"strconv"
	"time"

	"cloud.google.com/go/bigtable"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/history"
)

// colVelocityPrefix starts the columns of a user's views row: "h" + the
// start of a clock hour in Unix milliseconds, value the views counted for
// the user in that hour (a 64-bit big-endian counter).
const colVelocityPrefix = "h"

// viewsRowSuffix follows the user's prefix in the key of the user's views
// row in watch_latest: '~' is outside the video id alphabet, so the row is
// no video's, and it lies in the user's key range, which the account's
// erasure deletes.
const viewsRowSuffix = "~views"

// Velocity counts the views each user is counted per clock hour, the view
// velocity that moderation.ViewVelocity judges. Its client is the
// transactional one (host.Clients.BigtableTx): an increment is a
// read-modify-write.
type Velocity struct {
	latest *bigtable.Table
}

// NewVelocity uses the watch_latest table of client c.
func NewVelocity(c *bigtable.Client) *Velocity { return &Velocity{latest: c.Open(LatestTable)} }

// HourViews is one user's views in one clock hour.
type HourViews struct {
	UserID string
	Hour   time.Time // the hour's start, UTC
	Views  int64
}

// velocityConcurrency bounds the increments one Add has in flight.
const velocityConcurrency = 16

// Add counts fresh, views counted once each (claimstore.Claimed.Fresh),
// in the hours that received them, and returns each (user, hour)'s total
// after the addition. It is one atomic increment per user and hour: a view
// added twice is counted twice, so callers add only fresh views.
func (v *Velocity) Add(ctx context.Context, fresh []history.Watch) ([]HourViews, error) {
	type key struct {
		user string
		hour int64
	}
	adds := map[key]int64{}
	var order []key
	for _, w := range fresh {
		at := w.AcceptedAt().UnixMilli()
		k := key{w.UserID, at - at%time.Hour.Milliseconds()}
		if adds[k] == 0 {
			order = append(order, k)
		}
		adds[k]++
	}
	out := make([]HourViews, len(order))
	var g errgroup.Group
	g.SetLimit(velocityConcurrency)
	for i, k := range order {
		g.Go(func() error {
			m := bigtable.NewReadModifyWrite()
			col := colVelocityPrefix + strconv.FormatInt(k.hour, 10)
			m.Increment(LatestFamily, col, adds[k])
			row, err := v.latest.ApplyReadModifyWrite(ctx, history.UserPrefix(k.user)+viewsRowSuffix, m)
			if err != nil {
				return unavailable("count view velocity", err)
			}
			var n int64
			for _, it := range row[LatestFamily] {
				if it.Column == LatestFamily+":"+col && len(it.Value) == 8 {
					n = int64(binary.BigEndian.Uint64(it.Value))
				}
			}
			out[i] = HourViews{UserID: k.user, Hour: time.UnixMilli(k.hour).UTC(), Views: n}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
