package countstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/views"
)

// Viewer is the signed-in caller of a counts read.
type Viewer struct {
	UserID string
}

// ViewerReaction is the caller's own reaction on an item; Version is its
// reaction.State.Tag, the version the reactions API shows.
type ViewerReaction struct {
	Reaction string
	Version  int64
}

// reactionTagSQL is reaction.State.Tag of a Reactions row, in SQL: the
// version the reactions API shows.
const reactionTagSQL = "IF(CreateTime IS NULL, Version, UNIX_MICROS(CreateTime) + Version - 1)"

// Counts is the answer of one counts read.
type Counts struct {
	// Values holds every requested id (zero when unknown), never negative.
	Values map[string]counter.Values
	// Reactions holds the viewer's reactions on the ids that have one.
	Reactions map[string]ViewerReaction
}

// The columns of a row of a counts query (key, source, the values, then
// these): the viewer's reaction and its version, and the unique-viewers
// sketch.
var (
	reactionColumn = 2 + len(counterdb.ValueColumns)
	versionColumn  = reactionColumn + 1
	viewersColumn  = versionColumn + 1
)

// Sources of a row of the counts query.
const (
	srcCounted = 0 // snapshot or shard
	srcPending = 1 // the viewer's own change, not yet counted
	srcViewer  = 2 // the viewer's reaction
)

// Counts reads the counts of ids in one query: each counter's snapshot plus
// its live shards (no counting on read: at most 1 + 64 rows a counter).
//
// Anonymous reads may be up to maxStaleness old (served by the nearest
// replica without waiting for the leader; counts are eventually consistent by
// design). A viewer's read is strong and the same query adds the viewer's
// reactions and the viewer's own pending changes: at the query's one
// timestamp each of the viewer's changes is either counted or still pending
// (the consumer deletes the pending row in the transaction that counts it),
// so each is included exactly once.
func (s *Store) Counts(ctx context.Context, ids []string, viewer *Viewer, maxStaleness time.Duration) (Counts, error) {
	out := Counts{Values: make(map[string]counter.Values, len(ids)), Reactions: map[string]ViewerReaction{}}
	for _, id := range ids {
		out.Values[id] = counter.Values{}
	}
	if len(ids) == 0 {
		return out, nil
	}
	cols := counterdb.ValueList
	sql := fmt.Sprintf(`SELECT CounterKey, %[1]d AS Src, %[2]s, '' AS Reaction, 0 AS Version, Viewers FROM Counters WHERE CounterKey IN UNNEST(@ids)
UNION ALL SELECT CounterKey, %[1]d, %[2]s, '', 0, Viewers FROM CounterShards WHERE CounterKey IN UNNEST(@ids)`, srcCounted, cols)
	params := map[string]any{"ids": ids}
	tx := s.db.Stale(maxStaleness)
	if viewer != nil {
		sql += fmt.Sprintf(`
UNION ALL SELECT CounterKey, %[1]d, %[3]s, '', 0, CAST(NULL AS BYTES) FROM PendingDeltas@{FORCE_INDEX=PendingDeltasByUser} WHERE UserId = @viewer AND CounterKey IN UNNEST(@ids)
%[4]s
UNION ALL SELECT ContentId, %[2]d, %[5]s, Reaction, %[6]s, CAST(NULL AS BYTES) FROM Reactions WHERE UserId = @viewer AND ContentId IN UNNEST(@ids)`,
			srcPending, srcViewer, cols, sharesSQL(srcPending), counterdb.ZeroList, reactionTagSQL)
		params["viewer"] = viewer.UserID
		tx = s.db.Stale(0)
	}
	raw := map[string]counter.Values{}
	viewers := sketches{}
	err := tx.Query(ctx, spanner.Statement{SQL: sql, Params: params}).Do(func(r *spanner.Row) error {
		var key, reaction string
		var src, version int64
		if err := counterdb.Columns(r, &key, &src); err != nil {
			return err
		}
		if src == srcViewer {
			if err := r.Column(reactionColumn, &reaction); err != nil {
				return err
			}
			if err := r.Column(versionColumn, &version); err != nil {
				return err
			}
			out.Reactions[key] = ViewerReaction{Reaction: reaction, Version: version}
			return nil
		}
		v, err := counterdb.ReadValues(r, 2)
		if err != nil {
			return err
		}
		raw[key] = raw[key].Plus(v)
		var vb []byte
		if err := r.Column(viewersColumn, &vb); err != nil {
			return err
		}
		return viewers.add(key, vb)
	})
	if err != nil {
		return Counts{}, fmt.Errorf("countstore.Counts: %w", err)
	}
	viewers.estimate(raw)
	for k, v := range raw {
		out.Values[k] = v.Clamped()
	}
	return out, nil
}

// sharesSQL selects, as rows of source src, the viewer's shares of summed
// outbox rows still pending (see Share): the entries of the viewer's
// reaction rows on @ids whose PendingDeltas row exists.
func sharesSQL(src int) string {
	// An entry written before a field existed lacks it: zero.
	field := func(i int) string {
		return fmt.Sprintf("IFNULL(CAST(SPLIT(e, '%s')[SAFE_OFFSET(%d)] AS INT64), 0)", outboxstore.ShareSep, i)
	}
	vals := make([]string, len(counterdb.ValueColumns))
	for i := range vals {
		vals[i] = field(i + 1)
	}
	return fmt.Sprintf(`UNION ALL SELECT r.ContentId, %d, %s, '', 0, CAST(NULL AS BYTES)
FROM Reactions r CROSS JOIN UNNEST(r.PendingShares) AS e
JOIN PendingDeltas p ON p.EventId = SPLIT(e, '%s')[OFFSET(0)] AND p.CounterKey = r.ContentId
WHERE r.UserId = @viewer AND r.ContentId IN UNNEST(@ids)`, src, strings.Join(vals, ", "), outboxstore.ShareSep)
}

// sketches merges the unique-viewers sketches of a read's rows, per key.
type sketches map[string]*views.Viewers

// add merges a row's stored sketch (empty: none) into key's.
func (s sketches) add(key string, stored []byte) error {
	if len(stored) == 0 {
		return nil
	}
	if s[key] == nil {
		s[key] = views.NewViewers()
	}
	if err := s[key].MergeBytes(stored); err != nil {
		return fmt.Errorf("viewers of %s: %w", key, err)
	}
	return nil
}

// estimate sets each key's UniqueViewers in vals from its merged sketch.
func (s sketches) estimate(vals map[string]counter.Values) {
	for k, sk := range s {
		v := vals[k]
		v.UniqueViewers = sk.Estimate()
		vals[k] = v
	}
}

// Totals returns the exact count of each id now: snapshot plus shards plus
// every pending change. Tests and the benchmark compare it with the truth.
func (s *Store) Totals(ctx context.Context, ids []string) (counted, pending map[string]counter.Values, err error) {
	err = s.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		var err error
		counted, _, err = counterdb.Counted(ctx, tx, ids)
		if err != nil {
			return err
		}
		pending, err = counterdb.PendingSums(ctx, tx, ids)
		return err
	})
	return counted, pending, err
}
