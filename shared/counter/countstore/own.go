package countstore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/views"
)

// Snapshot is the public counts of some ids at one read timestamp.
type Snapshot struct {
	// Values are the counted sums (snapshot plus shards), unclamped: a
	// viewer's pending changes are added before clamping. An id with no
	// counter is absent.
	Values map[string]counter.Values
	// ReadTime is the timestamp Spanner read at.
	ReadTime time.Time
}

// Public reads the counted values of ids, at most maxStaleness old (served
// by the nearest replica without waiting for the leader), and says which
// timestamp it read at: the same for every caller, so an instance may keep
// it and serve it to anyone. It reads by key (Spanner's Read, no SQL): the
// snapshot rows, whose read fixes the timestamp, then the shard rows under
// each id's prefix at that timestamp.
func (s *Store) Public(ctx context.Context, ids []string, maxStaleness time.Duration) (Snapshot, error) {
	out := Snapshot{Values: make(map[string]counter.Values, len(ids))}
	if len(ids) == 0 {
		return out, nil
	}
	viewers := sketches{}
	tx := s.db.Stale(maxStaleness)
	if err := readCounted(ctx, tx, counterdb.Counters, counterdb.KeySet(ids), out.Values, viewers); err != nil {
		return Snapshot{}, fmt.Errorf("countstore.Public: %w", err)
	}
	ts, err := tx.Timestamp()
	if err != nil {
		return Snapshot{}, fmt.Errorf("countstore.Public: read timestamp: %w", err)
	}
	if err := readCounted(ctx, s.db.At(ts), counterdb.Shards, counterdb.PrefixSet(ids), out.Values, viewers); err != nil {
		return Snapshot{}, fmt.Errorf("countstore.Public: %w", err)
	}
	viewers.estimate(out.Values)
	out.ReadTime = ts
	return out, nil
}

// readCounted adds the values of the counted rows (Counters or
// CounterShards) in keys to vals, and merges their unique-viewers sketches
// into viewers, per key.
func readCounted(ctx context.Context, tx *spanner.ReadOnlyTransaction, table string, keys spanner.KeySet, vals map[string]counter.Values, viewers sketches) error {
	cols := append([]string{"CounterKey", counterdb.Viewers}, counterdb.ValueColumns...)
	err := tx.Read(ctx, table, keys, cols).Do(func(r *spanner.Row) error {
		var key string
		var vb []byte
		if err := counterdb.Columns(r, &key, &vb); err != nil {
			return err
		}
		v, err := counterdb.ReadValues(r, 2)
		if err != nil {
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

// OwnQuery asks for a viewer's view of IDs when the caller already holds the
// public values of Cached, read at Since or later.
type OwnQuery struct {
	Viewer string
	IDs    []string
	Cached []string
	Since  time.Time
	// At, when set, is the timestamp to read at instead of strongly: one
	// that holds every write the viewer is to see (a session token's), and
	// not before Since.
	At time.Time
}

// Own is the viewer's part of a counts read, read at ReadTime.
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

// Own reads the viewer's reactions and pending changes on q.IDs, strongly
// or at q.At, and the counted values of the ids whose held public value the caller
// cannot use (see Own.Fresh); Merge combines them with the held public
// values into counts exact for the viewer at ReadTime. It is OwnMany of one
// query.
func (s *Store) Own(ctx context.Context, q OwnQuery) (Own, error) {
	out, err := s.OwnMany(ctx, []OwnQuery{q})
	if err != nil {
		return Own{}, err
	}
	return out[0], nil
}

// OwnMany is Own for several viewers' queries at once, read together: one
// answer per query, in order, all at one ReadTime. Every read is a key
// lookup (Spanner's Read, no SQL), in two round trips whatever the number
// of queries: the viewers' reactions, strongly, which fixes ReadTime; then
// at ReadTime, side by side, the viewers' pending changes, the ids' live
// shards' values, their snapshot rows' values and FoldTime, the
// unique-viewers sketches of the ids not held (snapshots' and shards'), and
// the summed outbox rows the viewers' shares name. When every query names
// its timestamp (OwnQuery.At), there is no strong read: ReadTime is the
// newest named, and every read runs at once, in one round trip: in place of
// the summed outbox rows the shares name, every pending row of the ids
// (unless an id has more than summedRangeRows, then those rows by key after
// the reactions). A held id read again
// keeps the held unique-viewers estimate (a sketch is kilobytes a row, and a
// hot video has up to 64 shard rows; the estimate is public and as stale as
// the rest). The strong read starts after every query was asked, so each
// viewer sees every write acknowledged before their request.
//
// Why it is exact: a held value read at Since counts every change counted
// by then. A change counted after Since is added to a shard row, and that
// row leaves only with a fold, which sets FoldTime to its commit time, after
// Since. So an id with no shard row at ReadTime and FoldTime at or before
// Since is counted at ReadTime exactly as at Since, and held value + pending
// at ReadTime holds each of the viewer's changes once (the consumer deletes
// a pending row in the transaction that counts it). The other ids are read
// at ReadTime.
func (s *Store) OwnMany(ctx context.Context, qs []OwnQuery) ([]Own, error) {
	plans := make([]ownPlan, len(qs))
	for i, q := range qs {
		plans[i] = s.plan(q)
	}
	out, err := s.ownByKeys(ctx, plans)
	if err != nil {
		return nil, fmt.Errorf("countstore.Own: %w", err)
	}
	return out, nil
}

// ownPlan is a query with its ids split into those whose public value the
// caller holds (read at since or later) and the others.
type ownPlan struct {
	OwnQuery
	cached, uncached []string
	since            time.Time
}

func (s *Store) plan(q OwnQuery) ownPlan {
	p := ownPlan{OwnQuery: q, cached: []string{}, uncached: []string{}, since: q.Since}
	if !p.At.IsZero() && p.At.Before(p.Since) {
		// The held values are exact only for a read at Since or later.
		p.At = p.Since
	}
	held := map[string]bool{}
	for _, id := range q.Cached {
		held[id] = true
	}
	for _, id := range q.IDs {
		if held[id] {
			p.cached = append(p.cached, id)
		} else {
			p.uncached = append(p.uncached, id)
		}
	}
	if p.since.IsZero() {
		p.since = time.Unix(0, 0)
	}
	return p
}

func newOwn() Own {
	return Own{Fresh: map[string]counter.Values{}, Pending: map[string]counter.Values{}, Reactions: map[string]ViewerReaction{}, viewersHeld: map[string]bool{}}
}

// ownKey is a viewer's row of an id.
type ownKey struct{ viewer, id string }

// ownByKeys is OwnMany in key lookups (see OwnMany).
func (s *Store) ownByKeys(ctx context.Context, plans []ownPlan) ([]Own, error) {
	out := make([]Own, len(plans))
	for i := range out {
		out[i] = newOwn()
	}
	// The keys of every query, each once.
	var own []spanner.Key
	var viewers []string
	seenOwn, seenViewer := map[ownKey]bool{}, map[string]bool{}
	var ids, uncached []string
	seenID, seenUncached := map[string]bool{}, map[string]bool{}
	for _, p := range plans {
		for _, id := range p.IDs {
			if k := (ownKey{p.Viewer, id}); !seenOwn[k] {
				seenOwn[k] = true
				own = append(own, spanner.Key{p.Viewer, id})
			}
			if !seenID[id] {
				seenID[id] = true
				ids = append(ids, id)
			}
		}
		if !seenViewer[p.Viewer] {
			seenViewer[p.Viewer] = true
			viewers = append(viewers, p.Viewer)
		}
		for _, id := range p.uncached {
			if !seenUncached[id] {
				seenUncached[id] = true
				uncached = append(uncached, id)
			}
		}
	}
	if len(own) == 0 {
		return out, nil
	}

	// The viewers' reactions: the rows of the requested ids, by key.
	rk := reactionKeys{own: own, requested: seenOwn}

	// The timestamp: strongly (the reactions read fixes it, and the other
	// reads follow) unless every query names one, then the newest named,
	// and every read at once.
	var readTime time.Time
	strong := false
	for _, p := range plans {
		strong = strong || p.At.IsZero()
		if p.At.After(readTime) {
			readTime = p.At
		}
	}
	var rs ownReactions
	var summed map[outboxstore.RowKey]counter.Values
	g, gctx := errgroup.WithContext(ctx)
	if strong {
		var err error
		if rs, readTime, err = s.viewerReactions(ctx, s.db.Single(), rk); err != nil {
			return nil, err
		}
		g.Go(func() (err error) {
			summed, err = s.summedShares(gctx, rs.shareRows, readTime)
			return err
		})
	} else {
		// Every pending row of the ids beside the reactions, not the
		// summed rows their shares name after them: one round trip. Past
		// summedRangeRows an id, the named rows by key after all.
		g.Go(func() (err error) {
			rs, _, err = s.viewerReactions(gctx, s.db.At(readTime), rk)
			return err
		})
		g.Go(func() (err error) {
			limit := summedRangeRows * len(ids)
			var n int
			if summed, n, err = outboxstore.ReadCounterRows(gctx, s.db.At(readTime), ids, limit); n == limit {
				summed = nil
			}
			return err
		})
	}

	// At readTime, side by side. Each goroutine fills its own maps.
	pending := map[ownKey]counter.Values{}
	shards, shardViewers := map[string]counter.Values{}, sketches{}
	snaps, foldTimes := map[string]counter.Values{}, map[string]spanner.NullTime{}
	snapViewers := sketches{}
	g.Go(func() error {
		// Every pending row of each viewer, one key range a viewer: a
		// viewer's rows not yet counted are few (the consumer deletes
		// them as it counts them), and one range costs less than a
		// lookup a requested id. A viewer may have many while the
		// consumer is down: past pendingRangeRows a viewer, the rows of
		// the requested ids only.
		limit := pendingRangeRows * len(viewers)
		n, err := readPending(gctx, s.db.At(readTime), counterdb.PrefixSet(viewers), limit, pending)
		if err != nil || n < limit {
			return err
		}
		clear(pending)
		prefixes := make([]spanner.KeySet, len(own))
		for i, k := range own {
			prefixes[i] = k.AsPrefix()
		}
		_, err = readPending(gctx, s.db.At(readTime), spanner.KeySets(prefixes...), 0, pending)
		return err
	})
	g.Go(func() error {
		// Values only: a held id keeps the held unique-viewers estimate,
		// and a hot video's shards hold kilobytes of sketch each.
		cols := append([]string{"CounterKey"}, counterdb.ValueColumns...)
		if err := counterdb.AddValues(s.db.At(readTime).Read(gctx, counterdb.Shards, counterdb.PrefixSet(ids), cols), shards); err != nil {
			return fmt.Errorf("read shards: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		// Values and FoldTime, not the snapshot's sketch (kilobytes a
		// counter): a held id's unique viewers stay the held estimate.
		cols := append([]string{"CounterKey", "FoldTime"}, counterdb.ValueColumns...)
		return s.db.At(readTime).Read(gctx, counterdb.Counters, counterdb.KeySet(ids), cols).Do(func(r *spanner.Row) error {
			var key string
			var t spanner.NullTime
			if err := counterdb.Columns(r, &key, &t); err != nil {
				return err
			}
			v, err := counterdb.ReadValues(r, 2)
			if err != nil {
				return err
			}
			snaps[key], foldTimes[key] = v, t
			return nil
		})
	})
	if len(uncached) > 0 {
		// The unique-viewers sketches of the ids not held: snapshots' and
		// shards'.
		g.Go(func() error {
			return readSketches(gctx, s.db.At(readTime), counterdb.Counters, counterdb.KeySet(uncached), snapViewers)
		})
		g.Go(func() error {
			return readSketches(gctx, s.db.At(readTime), counterdb.Shards, counterdb.PrefixSet(uncached), shardViewers)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if !strong {
		if summed == nil {
			var err error
			if summed, err = s.summedShares(ctx, rs.shareRows, readTime); err != nil {
				return nil, err
			}
		} else {
			s.rememberGone(rs.shareRows, summed, readTime)
		}
	}
	reactions, shares := rs.reactions, rs.shares
	// The ids not held, whole at readTime: the same for every query.
	fresh := map[string]counter.Values{}
	for _, id := range uncached {
		fresh[id] = snaps[id].Plus(shards[id])
		if sk := shardViewers[id]; sk != nil {
			if snapViewers[id] == nil {
				snapViewers[id] = views.NewViewers()
			}
			if err := snapViewers[id].Merge(sk); err != nil {
				return nil, fmt.Errorf("viewers of %s: %w", id, err)
			}
		}
	}
	snapViewers.estimate(fresh)
	for i, p := range plans {
		o := &out[i]
		o.ReadTime = readTime
		for _, id := range p.IDs {
			k := ownKey{p.Viewer, id}
			if vr, ok := reactions[k]; ok {
				o.Reactions[id] = vr
			}
			if v, ok := pending[k]; ok {
				o.Pending[id] = o.Pending[id].Plus(v)
			}
			for _, sh := range shares[k] {
				if _, ok := summed[sh.RowKey()]; ok {
					o.Pending[id] = o.Pending[id].Plus(sh.Values)
				}
			}
		}
		for _, id := range p.uncached {
			o.Fresh[id] = fresh[id]
		}
		for _, id := range p.cached {
			_, sharded := shards[id]
			if t := foldTimes[id]; sharded || t.Valid && t.Time.After(p.since) {
				o.Fresh[id] = snaps[id].Plus(shards[id])
				o.viewersHeld[id] = true
			}
		}
	}
	return out, nil
}

// reactionKeys are the reaction rows a read of viewers' own rows takes:
// the viewers' rows of the ids they asked for.
type reactionKeys struct {
	own       []spanner.Key
	requested map[ownKey]bool
}

// viewerReactions reads the viewers' reaction rows of the requested keys
// through tx and returns them with tx's read timestamp.
func (s *Store) viewerReactions(ctx context.Context, tx *spanner.ReadOnlyTransaction, k reactionKeys) (ownReactions, time.Time, error) {
	rs := ownReactions{}
	if err := rs.read(ctx, tx, spanner.KeySetFromKeys(k.own...), k.requested); err != nil {
		return ownReactions{}, time.Time{}, err
	}
	readTime, err := tx.Timestamp()
	if err != nil {
		return ownReactions{}, time.Time{}, fmt.Errorf("read timestamp: %w", err)
	}
	return rs, readTime, nil
}

// summedShares reads, at readTime, the summed outbox rows of keys not known
// to be gone (sharesToRead), and remembers the ones found gone.
func (s *Store) summedShares(ctx context.Context, keys []outboxstore.RowKey, readTime time.Time) (map[outboxstore.RowKey]counter.Values, error) {
	toRead := s.sharesToRead(keys, readTime)
	if len(toRead) == 0 {
		return nil, nil
	}
	summed, err := outboxstore.ReadRows(ctx, s.db.At(readTime), toRead)
	if err != nil {
		return nil, err
	}
	s.rememberGone(toRead, summed, readTime)
	return summed, nil
}

// rememberGone remembers the summed rows of keys that a read at readTime
// found gone (absent from summed).
func (s *Store) rememberGone(keys []outboxstore.RowKey, summed map[outboxstore.RowKey]counter.Values, readTime time.Time) {
	for _, k := range keys {
		if _, ok := summed[k]; !ok {
			s.gone.Put(k, readTime)
		}
	}
}

// summedRangeRows is how many pending rows of each id a read at a named
// timestamp takes beside the viewers' reactions, before it reads the summed
// rows their shares name by key after them instead. An id's rows not yet
// counted are few: the consumer deletes them as it counts them.
var summedRangeRows = 20

// ownReactions are the viewers' reaction rows of the requested ids, and the
// shares those rows hold.
type ownReactions struct {
	reactions map[ownKey]ViewerReaction
	shares    map[ownKey][]outboxstore.Share
	shareRows []outboxstore.RowKey
}

// read adds the Reactions rows in keys that requested holds.
func (o *ownReactions) read(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys spanner.KeySet, requested map[ownKey]bool) error {
	if o.reactions == nil {
		o.reactions, o.shares = map[ownKey]ViewerReaction{}, map[ownKey][]outboxstore.Share{}
	}
	cols := []string{"UserId", "ContentId", "Reaction", "Version", "PendingShares", "CreateTime"}
	err := tx.Read(ctx, counterdb.Reactions, keys, cols).Do(func(r *spanner.Row) error {
		var k ownKey
		if err := counterdb.Columns(r, &k.viewer, &k.id); err != nil {
			return err
		}
		if !requested[k] {
			return nil
		}
		var st reaction.State
		var kind string
		var entries []string
		var created spanner.NullTime
		for i, p := range []any{&kind, &st.Version, &entries, &created} {
			if err := r.Column(2+i, p); err != nil {
				return err
			}
		}
		st.Reaction, st.Created = reaction.Kind(kind), created.Time
		// The version the reactions API shows: its ETag.
		o.reactions[k] = ViewerReaction{Reaction: kind, Version: st.Tag()}
		sh, err := outboxstore.ParseShares(k.id, entries)
		for _, x := range sh {
			o.shareRows = append(o.shareRows, x.RowKey())
		}
		o.shares[k] = sh
		return err
	})
	if err != nil {
		return fmt.Errorf("reactions: %w", err)
	}
	return nil
}

// countedShares is how many summed outbox rows found gone a store
// remembers (Store.gone): about 5 MB when full.
const countedShares = 50_000

// sharesToRead are the summed rows of keys not known to be gone at t: a
// summed row, once counted, is deleted and never written again (its event
// id names one transaction's outbox batch), so a row read as gone at some
// timestamp is gone at every later one. A read at an earlier timestamp
// reads it.
func (s *Store) sharesToRead(keys []outboxstore.RowKey, t time.Time) []outboxstore.RowKey {
	var out []outboxstore.RowKey
	for _, k := range keys {
		if at, ok := s.gone.Get(k); ok && !t.Before(at) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// pendingRangeRows is how many pending rows of each viewer a read takes as
// one key range before it reads those of the requested ids only.
var pendingRangeRows = 1000

// readPending adds the PendingDeltasByUser rows in keys (at most limit, 0:
// all) to pending by viewer and counter, and returns how many it read.
func readPending(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys spanner.KeySet, limit int, pending map[ownKey]counter.Values) (int, error) {
	cols := append([]string{"UserId", "CounterKey"}, counterdb.ValueColumns...)
	n := 0
	err := tx.ReadWithOptions(ctx, counterdb.Pending, keys, cols, &spanner.ReadOptions{Index: counterdb.PendingByUser, Limit: limit}).Do(func(r *spanner.Row) error {
		var k ownKey
		if err := counterdb.Columns(r, &k.viewer, &k.id); err != nil {
			return err
		}
		v, err := counterdb.ReadValues(r, 2)
		if err != nil {
			return err
		}
		pending[k] = pending[k].Plus(v)
		n++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read pending: %w", err)
	}
	return n, nil
}

// readSketches merges, per key, the unique-viewers sketches of the counted
// rows (Counters or CounterShards) in keys.
func readSketches(ctx context.Context, tx *spanner.ReadOnlyTransaction, table string, keys spanner.KeySet, viewers sketches) error {
	err := tx.Read(ctx, table, keys, []string{"CounterKey", counterdb.Viewers}).Do(func(r *spanner.Row) error {
		var key string
		var vb []byte
		if err := counterdb.Columns(r, &key, &vb); err != nil {
			return err
		}
		return viewers.add(key, vb)
	})
	if err != nil {
		return fmt.Errorf("read %s sketches: %w", table, err)
	}
	return nil
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
