package counterstore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/counter"
)

// viewersColumn is the index of the sketch in the rows of countedSQL.
const viewersColumn = 9

// Snapshot is the public counts of some ids at one read timestamp.
type Snapshot struct {
	// Values are the counted sums (snapshot plus shards), unclamped: a
	// viewer's pending changes are added before clamping. An id with no
	// counter is absent.
	Values map[string]counter.Values
	// ReadTime is the timestamp Spanner read at.
	ReadTime time.Time
}

// countedSQL reads the counted rows of the counters whose keys the
// subquery or array keys names, with their unique-viewers sketches (column
// viewersColumn).
func countedSQL(src int, keys string) string {
	return fmt.Sprintf(`SELECT CounterKey, %[1]d AS Src, %[2]s, '' AS Reaction, 0 AS Version, Viewers FROM Counters WHERE CounterKey IN %[3]s
UNION ALL SELECT CounterKey, %[1]d, %[2]s, '', 0, Viewers FROM CounterShards WHERE CounterKey IN %[3]s`, src, "Likes, Dislikes, Comments, Replies, Views", keys)
}

// Public reads the counted values of ids, at most maxStaleness old (served
// by the nearest replica without waiting for the leader), in one query, and
// says which timestamp it read at: the same for every caller, so an
// instance may keep it and serve it to anyone.
func (s *Store) Public(ctx context.Context, ids []string, maxStaleness time.Duration) (Snapshot, error) {
	out := Snapshot{Values: make(map[string]counter.Values, len(ids))}
	if len(ids) == 0 {
		return out, nil
	}
	tx := s.db.Stale(maxStaleness)
	viewers := sketches{}
	err := tx.Query(ctx, spanner.Statement{SQL: countedSQL(srcCounted, "UNNEST(@ids)"), Params: map[string]any{"ids": ids}}).Do(func(r *spanner.Row) error {
		var key string
		var vb []byte
		if err := columns(r, &key); err != nil {
			return err
		}
		v, err := readValues(r, 2)
		if err != nil {
			return err
		}
		if err := r.Column(viewersColumn, &vb); err != nil {
			return err
		}
		out.Values[key] = out.Values[key].Plus(v)
		return viewers.add(key, vb)
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("counterstore.Public: %w", err)
	}
	viewers.estimate(out.Values)
	if out.ReadTime, err = tx.Timestamp(); err != nil {
		return Snapshot{}, fmt.Errorf("counterstore.Public: read timestamp: %w", err)
	}
	return out, nil
}

// OwnQuery asks for a viewer's view of IDs when the caller already holds the
// public values of Cached, read at Since or later.
type OwnQuery struct {
	Viewer string
	IDs    []string
	Cached []string
	Since  time.Time
}

// Own is the viewer's part of a counts read, read strongly at ReadTime.
type Own struct {
	// Fresh holds the counted values, at ReadTime, of every id whose held
	// public value cannot be used: not held, or its counter was counted
	// into or folded since the value was read.
	Fresh map[string]counter.Values
	// Pending holds the viewer's own changes not yet counted at ReadTime.
	Pending map[string]counter.Values
	// Reactions holds the viewer's reactions on the ids that have one.
	Reactions map[string]ViewerReaction
	ReadTime  time.Time
	// viewersHeld marks the Fresh ids whose unique viewers Merge takes from
	// the held value (their sketch was not read).
	viewersHeld map[string]bool
}

// Own reads the viewer's reactions and pending changes on q.IDs, strongly,
// and the counted values of the ids whose held public value the caller
// cannot use (see Own.Fresh); Merge combines them with the held public
// values into counts exact for the viewer at ReadTime. Every read is a key
// lookup (Spanner's Read, no SQL), in two round trips: the viewer's
// reactions, strongly, which fixes ReadTime; then at ReadTime, side by side,
// the viewer's pending changes, the ids' live shards, their snapshot rows'
// values and FoldTime, and the unique-viewers sketches of the ids not held.
// A held id read again keeps the held unique-viewers estimate (a snapshot's
// sketch is kilobytes; the estimate is public and as stale as the rest).
//
// Why it is exact: a held value read at Since counts every change counted
// by then. A change counted after Since is added to a shard row, and that
// row leaves only with a fold, which sets FoldTime to its commit time, after
// Since. So an id with no shard row at ReadTime and FoldTime at or before
// Since is counted at ReadTime exactly as at Since, and held value + pending
// at ReadTime holds each of the viewer's changes once (the consumer deletes
// a pending row in the transaction that counts it). The other ids are read
// at ReadTime. In naive mode (counting straight into the snapshot row,
// leaving no trace) every id is read again.
//
// Options.OneQuery reads the same in one SQL query instead (one round trip,
// but the emulator spends tens of milliseconds compiling each query): the
// benchmark's baseline.
func (s *Store) Own(ctx context.Context, q OwnQuery) (Own, error) {
	if len(q.IDs) == 0 {
		return Own{Fresh: map[string]counter.Values{}, Pending: map[string]counter.Values{}, Reactions: map[string]ViewerReaction{}}, nil
	}
	held := map[string]bool{}
	if s.mode != Naive {
		for _, id := range q.Cached {
			held[id] = true
		}
	}
	cached := make([]string, 0, len(held))
	uncached := []string{}
	for _, id := range q.IDs {
		if held[id] {
			cached = append(cached, id)
		} else {
			uncached = append(uncached, id)
		}
	}
	since := q.Since
	if since.IsZero() {
		since = time.Unix(0, 0)
	}
	var out Own
	var err error
	if s.ownOneQuery {
		out, err = s.ownInOneQuery(ctx, q, cached, uncached, since)
	} else {
		out, err = s.ownByKeys(ctx, q, cached, uncached, since)
	}
	if err != nil {
		return Own{}, fmt.Errorf("counterstore.Own: %w", err)
	}
	return out, nil
}

// ownByKeys is Own in key lookups (see Own).
func (s *Store) ownByKeys(ctx context.Context, q OwnQuery, cached, uncached []string, since time.Time) (Own, error) {
	out := Own{Fresh: map[string]counter.Values{}, Pending: map[string]counter.Values{}, Reactions: map[string]ViewerReaction{}, viewersHeld: map[string]bool{}}
	own := make([]spanner.Key, len(q.IDs))
	ownPrefixes := make([]spanner.KeySet, len(q.IDs))
	for i, id := range q.IDs {
		own[i] = spanner.Key{q.Viewer, id}
		ownPrefixes[i] = own[i].AsPrefix()
	}
	rx := s.db.Single()
	var shares []Share
	err := rx.Read(ctx, tableReactions, spanner.KeySetFromKeys(own...), []string{"ContentId", "Reaction", "Version", "PendingShares"}).Do(func(r *spanner.Row) error {
		var id string
		var vr ViewerReaction
		var entries []string
		if err := columns(r, &id, &vr.Reaction, &vr.Version, &entries); err != nil {
			return err
		}
		out.Reactions[id] = vr
		sh, err := ParseShares(id, entries)
		shares = append(shares, sh...)
		return err
	})
	if err != nil {
		return Own{}, fmt.Errorf("reactions: %w", err)
	}
	if out.ReadTime, err = rx.Timestamp(); err != nil {
		return Own{}, fmt.Errorf("read timestamp: %w", err)
	}

	// At ReadTime, side by side. Each goroutine fills its own maps.
	shards, shardViewers := map[string]counter.Values{}, sketches{}
	snaps, foldTimes := map[string]counter.Values{}, map[string]spanner.NullTime{}
	snapViewers := sketches{}
	var summed map[RowKey]counter.Values
	g, gctx := errgroup.WithContext(ctx)
	if len(shares) > 0 {
		g.Go(func() error {
			keys := make([]RowKey, len(shares))
			for i, sh := range shares {
				keys[i] = sh.RowKey()
			}
			var err error
			summed, err = ReadRows(gctx, s.db.At(out.ReadTime), keys)
			return err
		})
	}
	g.Go(func() error {
		cols := append([]string{"UserId", "CounterKey"}, valueColumns...)
		return s.db.At(out.ReadTime).ReadUsingIndex(gctx, tablePending, indexPendingByUser, spanner.KeySets(ownPrefixes...), cols).Do(func(r *spanner.Row) error {
			var user, key string
			if err := columns(r, &user, &key); err != nil {
				return err
			}
			v, err := readValues(r, 2)
			if err != nil {
				return err
			}
			out.Pending[key] = out.Pending[key].Plus(v)
			return nil
		})
	})
	g.Go(func() error {
		return readCounted(gctx, s.db.At(out.ReadTime), tableShards, prefixSet(q.IDs), shards, shardViewers)
	})
	g.Go(func() error {
		// Values and FoldTime, not the snapshot's sketch (kilobytes a
		// counter): a held id's unique viewers stay the held estimate.
		cols := append([]string{"CounterKey", "FoldTime"}, valueColumns...)
		return s.db.At(out.ReadTime).Read(gctx, tableCounters, keySet(q.IDs), cols).Do(func(r *spanner.Row) error {
			var key string
			var t spanner.NullTime
			if err := columns(r, &key, &t); err != nil {
				return err
			}
			v, err := readValues(r, 2)
			if err != nil {
				return err
			}
			snaps[key], foldTimes[key] = v, t
			return nil
		})
	})
	if len(uncached) > 0 {
		g.Go(func() error {
			return s.db.At(out.ReadTime).Read(gctx, tableCounters, keySet(uncached), []string{"CounterKey", colViewers}).Do(func(r *spanner.Row) error {
				var key string
				var vb []byte
				if err := columns(r, &key, &vb); err != nil {
					return err
				}
				return snapViewers.add(key, vb)
			})
		})
	}
	if err := g.Wait(); err != nil {
		return Own{}, err
	}
	for _, sh := range shares {
		if _, ok := summed[sh.RowKey()]; ok {
			out.Pending[sh.Key] = out.Pending[sh.Key].Plus(sh.Values)
		}
	}
	for _, id := range uncached {
		out.Fresh[id] = snaps[id].Plus(shards[id])
		if sk := shardViewers[id]; sk != nil {
			if snapViewers[id] == nil {
				snapViewers[id] = counter.NewViewers()
			}
			if err := snapViewers[id].Merge(sk); err != nil {
				return Own{}, fmt.Errorf("viewers of %s: %w", id, err)
			}
		}
	}
	snapViewers.estimate(out.Fresh)
	for _, id := range cached {
		_, sharded := shards[id]
		if t := foldTimes[id]; sharded || t.Valid && t.Time.After(since) {
			out.Fresh[id] = snaps[id].Plus(shards[id])
			out.viewersHeld[id] = true
		}
	}
	return out, nil
}

// keySet is the set of ids' primary keys in a table keyed by CounterKey.
func keySet(ids []string) spanner.KeySet {
	ks := make([]spanner.Key, len(ids))
	for i, id := range ids {
		ks[i] = spanner.Key{id}
	}
	return spanner.KeySetFromKeys(ks...)
}

// readCounted adds up, per key, the values and sketches of the counted rows
// (Counters or CounterShards) in keys.
func readCounted(ctx context.Context, tx *spanner.ReadOnlyTransaction, table string, keys spanner.KeySet, vals map[string]counter.Values, viewers sketches) error {
	cols := append(append([]string{"CounterKey"}, valueColumns...), colViewers)
	err := tx.Read(ctx, table, keys, cols).Do(func(r *spanner.Row) error {
		var key string
		var vb []byte
		if err := columns(r, &key); err != nil {
			return err
		}
		v, err := readValues(r, 1)
		if err != nil {
			return err
		}
		if err := r.Column(1+len(valueColumns), &vb); err != nil {
			return err
		}
		vals[key] = vals[key].Plus(v)
		return viewers.add(key, vb)
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	return nil
}

// srcFresh marks an id whose counted values the query read (see Own).
const srcFresh = 3

// ownInOneQuery is Own in one SQL query: the ids whose public value cannot
// be used are the uncached ones and the cached ones with a MovedCounters
// row or a fold since since.
func (s *Store) ownInOneQuery(ctx context.Context, q OwnQuery, cached, uncached []string, since time.Time) (Own, error) {
	out := Own{Fresh: map[string]counter.Values{}, Pending: map[string]counter.Values{}, Reactions: map[string]ViewerReaction{}}
	cols := "Likes, Dislikes, Comments, Replies, Views"
	sql := fmt.Sprintf(`WITH Fresh AS (
  SELECT CounterKey FROM UNNEST(@uncached) AS CounterKey
  UNION DISTINCT SELECT CounterKey FROM MovedCounters WHERE CounterKey IN UNNEST(@cached)
  UNION DISTINCT SELECT CounterKey FROM Counters WHERE CounterKey IN UNNEST(@cached) AND FoldTime > @since
)
%[1]s
UNION ALL SELECT CounterKey, %[2]d, 0, 0, 0, 0, 0, '', 0, CAST(NULL AS BYTES) FROM Fresh
UNION ALL SELECT CounterKey, %[3]d, %[5]s, '', 0, CAST(NULL AS BYTES) FROM PendingDeltas@{FORCE_INDEX=PendingDeltasByUser} WHERE UserId = @viewer AND CounterKey IN UNNEST(@ids)
%[6]s
UNION ALL SELECT ContentId, %[4]d, 0, 0, 0, 0, 0, Reaction, Version, CAST(NULL AS BYTES) FROM Reactions WHERE UserId = @viewer AND ContentId IN UNNEST(@ids)`,
		countedSQL(srcCounted, "(SELECT CounterKey FROM Fresh)"), srcFresh, srcPending, srcViewer, cols, sharesSQL(srcPending))
	params := map[string]any{"ids": q.IDs, "cached": cached, "uncached": uncached, "since": since, "viewer": q.Viewer}
	tx := s.db.Single()
	viewers := sketches{}
	err := tx.Query(ctx, spanner.Statement{SQL: sql, Params: params}).Do(func(r *spanner.Row) error {
		var key string
		var src int64
		if err := columns(r, &key, &src); err != nil {
			return err
		}
		switch src {
		case srcViewer:
			var vr ViewerReaction
			if err := r.Column(7, &vr.Reaction); err != nil {
				return err
			}
			if err := r.Column(8, &vr.Version); err != nil {
				return err
			}
			out.Reactions[key] = vr
			return nil
		case srcFresh:
			out.Fresh[key] = out.Fresh[key]
			return nil
		}
		v, err := readValues(r, 2)
		if err != nil {
			return err
		}
		if src == srcPending {
			out.Pending[key] = out.Pending[key].Plus(v)
			return nil
		}
		out.Fresh[key] = out.Fresh[key].Plus(v)
		var vb []byte
		if err := r.Column(viewersColumn, &vb); err != nil {
			return err
		}
		return viewers.add(key, vb)
	})
	if err != nil {
		return Own{}, err
	}
	viewers.estimate(out.Fresh)
	if out.ReadTime, err = tx.Timestamp(); err != nil {
		return Own{}, fmt.Errorf("read timestamp: %w", err)
	}
	return out, nil
}

// Merge returns the viewer's counts of ids: the fresh counted values where
// the query read them, the held public ones elsewhere, plus the viewer's
// pending changes; clamped, every id present.
func (o Own) Merge(ids []string, public map[string]counter.Values) map[string]counter.Values {
	out := make(map[string]counter.Values, len(ids))
	for _, id := range ids {
		v, ok := o.Fresh[id]
		if !ok {
			v = public[id]
		} else if o.viewersHeld[id] {
			v.UniqueViewers = public[id].UniqueViewers
		}
		out[id] = v.Plus(o.Pending[id]).Clamped()
	}
	return out
}
