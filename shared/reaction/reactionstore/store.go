// Package reactionstore keeps reactions in Spanner: the transaction that
// records a change together with its counter deltas
// (outbox), the group commit of concurrent changes, the one-read lookup of a
// user's reactions, and the reactions' side of reconciliation. The flags
// are moderation's (moderationstore); the store reads them in its own
// transactions: a flagged account's reaction is written uncounted, and
// flag changes move the tallies (ApplyFlags).
package reactionstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/spannerdb"
)

const (
	tableReactions = "Reactions"
	tableFlagged   = "FlaggedUsers"
	// tableLimits held the reactions' per-user limit state; an account
	// erasure still deletes a user's row (EraseUserRows).
	tableLimits     = "ReactionRateLimits"
	tableWatermarks = "JobWatermarks"
)

// MaxUserIDBytes bounds user ids stored in keys (STRING(128) characters).
const MaxUserIDBytes = 512

// Store is the reactions' Spanner store.
type Store struct {
	db  *spannerdb.DB
	now func() time.Time
}

// New returns the store. The per-user limit is the Writer's (Writer.LimitWith).
func New(db *spannerdb.DB) *Store {
	return &Store{db: db, now: time.Now}
}

// SetRequest is one PUT of a reaction.
type SetRequest struct {
	UserID    string
	ContentID string
	To        reaction.Kind
	IfMatch   *int64
	// erase marks the account erasure's own change, the one write of a user
	// with an open erasure that is not refused.
	erase bool
}

// SetResult is the outcome of one SetRequest.
type SetResult struct {
	State      reaction.State
	UpdateTime time.Time
	// CommitTime is the commit timestamp of the transaction that answered
	// the request (UpdateTime is older when nothing changed): a read at it
	// sees the request and every earlier one of its user.
	CommitTime time.Time
	// Undone says that the request took a like or dislike back (set it to
	// none): undo traffic, which the service measures.
	Undone bool
	// Event is the change to publish; nil when nothing counts (no change, or
	// a flagged account).
	Event *events.Event
	// Republish holds the user's earlier changes on the item that are still
	// pending: a request that changes nothing may be the client's retry of
	// a request whose publish failed or whose answer was lost, so their
	// messages are sent again without waiting for the relay.
	Republish []events.Event
	// Err is this request's own failure: *reaction.ErrVersionMismatch,
	// *errs.RateLimitedError or errs.ErrAccountErasing. The others in the batch are unaffected.
	Err error
}

type pairKey struct{ user, content string }

// SetMany records reqs, in order, in one read-write transaction: for each,
// the transition from the stored reaction, the new
// row, and its counter deltas in the outbox (unless the account is flagged).
// Requests of one user on one item see each other in order.
//
// The outbox of the transaction is one summed row per item (see
// outboxstore.Share), each user's part of it kept on their reaction row:
// a like costs its reaction row and nothing more. An undo deletes the row,
// so its change, and the shares the row still held (taken out of their
// summed rows), are one outbox row of the user's own, found by user as
// before.
func (s *Store) SetMany(ctx context.Context, reqs []SetRequest) ([]SetResult, error) {
	var results []SetResult
	// created marks the results whose row this transaction creates: their
	// State.Created is its commit timestamp.
	var created []bool
	commitTS, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		results = make([]SetResult, len(reqs))
		created = make([]bool, len(reqs))
		newRows := map[pairKey]bool{}
		now := s.now()
		// The outbox events of this transaction form one batch: one key
		// range the consumer deletes at once.
		batch := outboxstore.NewBatch()
		var pairKeys, userKeys []spanner.Key
		seenUser := map[string]bool{}
		for _, r := range reqs {
			pairKeys = append(pairKeys, spanner.Key{r.UserID, r.ContentID})
			if !seenUser[r.UserID] {
				seenUser[r.UserID] = true
				userKeys = append(userKeys, spanner.Key{r.UserID})
			}
		}
		type stored struct {
			state   reaction.State
			updated time.Time
			shares  []outboxstore.Share
			// tallied: the reaction is in its item's tally (NULL: a row
			// that predates the tallies, not in it).
			tallied spanner.NullBool
		}
		states := map[pairKey]stored{}
		var shareRows []outboxstore.RowKey
		err := tx.Read(ctx, tableReactions, spanner.KeySetFromKeys(pairKeys...),
			[]string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime", "PendingShares", "Tallied", "CreateTime"}).Do(func(r *spanner.Row) error {
			var k pairKey
			var kind string
			var st stored
			var entries []string
			var createTime spanner.NullTime
			if err := r.Columns(&k.user, &k.content, &kind, &st.state.Version, &st.state.Generation, &st.updated, &entries, &st.tallied, &createTime); err != nil {
				return err
			}
			st.state.Reaction, st.state.Created = reaction.Kind(kind), createTime.Time
			var err error
			if st.shares, err = outboxstore.ParseShares(k.content, entries); err != nil {
				return err
			}
			for _, sh := range st.shares {
				shareRows = append(shareRows, sh.RowKey())
			}
			states[k] = st
			return nil
		})
		if err != nil {
			return fmt.Errorf("read reactions: %w", err)
		}
		flagged := map[string]bool{}
		err = tx.Read(ctx, tableFlagged, spanner.KeySetFromKeys(userKeys...), []string{"UserId", "Flagged"}).Do(func(r *spanner.Row) error {
			var u string
			var f bool
			if err := r.Columns(&u, &f); err != nil {
				return err
			}
			flagged[u] = f
			return nil
		})
		if err != nil {
			return fmt.Errorf("read flagged users: %w", err)
		}
		erasing, err := accountstore.Erasing(ctx, tx, userKeys)
		if err != nil {
			return err
		}
		// The summed rows the stored shares are part of: a share whose row
		// is gone was counted, and is dropped.
		box := summedOutbox{batch: batch, byKey: map[string]int{}}
		if box.earlier, err = outboxstore.ReadRows(ctx, tx, shareRows); err != nil {
			return err
		}
		for k, st := range states {
			st.shares = box.pending(st.shares)
			states[k] = st
		}
		var ms []*spanner.Mutation
		summedFor := make([]string, len(reqs)) // the item whose summed event a result carries
		tallies := map[string]counter.Values{} // the moves of the items' tallies
		for i, r := range reqs {
			res := &results[i]
			if erasing[r.UserID] && !r.erase {
				res.Err = errs.ErrAccountErasing
				continue
			}
			k := pairKey{r.UserID, r.ContentID}
			cur := states[k]
			tr, err := reaction.Apply(r.UserID, r.ContentID, cur.state, r.To, r.IfMatch, rand.Int64)
			if err != nil {
				res.Err = err
				continue
			}
			if !tr.Changed {
				res.State = tr.Next
				created[i] = newRows[k]
				res.UpdateTime = cur.updated
				pend, err := outboxstore.PendingEvents(ctx, tx, r.UserID, r.ContentID)
				if err != nil {
					return err
				}
				res.Republish = append(pend, box.republish(cur.shares)...)
				continue
			}
			res.State = tr.Next
			res.Undone = tr.Next.Current() == reaction.None
			// The tally holds the rows of accounts not flagged when written.
			var was, is counter.Values
			if cur.tallied.Valid && cur.tallied.Bool {
				was = reaction.Counted(cur.state.Current())
			}
			if !flagged[r.UserID] {
				is = reaction.Counted(tr.Next.Current())
			}
			tallies[r.ContentID] = tallies[r.ContentID].Plus(is).Minus(was)
			var own counter.Values // what this change adds to the counts
			if !flagged[r.UserID] {
				own = counter.Coalesce(tr.Deltas)[r.ContentID]
			}
			shares := cur.shares
			if tr.Next.Current() == reaction.None {
				// The row goes, and with it the shares it held: they join
				// this change in an outbox row of the user's own.
				for _, sh := range shares {
					own = own.Plus(sh.Values)
					box.takeOut(sh)
				}
				shares = nil
				ms = append(ms, spanner.Delete(tableReactions, spanner.Key{r.UserID, r.ContentID}))
				delete(states, k)
				delete(newRows, k)
			} else if !own.IsZero() && len(shares) < maxShares {
				shares = box.add(shares, r.ContentID, own)
				summedFor[i] = r.ContentID
				own = counter.Values{}
			}
			if !own.IsZero() {
				ev := tr.Event(r.UserID, r.ContentID, now)
				ev.Deltas = counter.Deltas(r.ContentID, own)
				ev.ID = outboxstore.BatchedID(batch, ev.ID)
				res.Event = &ev
				ms = append(ms, outboxstore.Pending(ev, r.UserID)...)
			}
			if tr.Next.Current() != reaction.None {
				cols := []string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime", "PendingShares", "Tallied"}
				vals := []any{r.UserID, r.ContentID, string(tr.Next.Reaction), tr.Next.Version, tr.Next.Generation, spanner.CommitTimestamp, outboxstore.Entries(shares), !flagged[r.UserID]}
				if _, exists := states[k]; !exists {
					// A new row records its creation in the same mutation:
					// the account's first-seen time is its earliest row's,
					// and the row's Tags start from it.
					cols, vals = append(cols, "CreateTime"), append(vals, spanner.CommitTimestamp)
					newRows[k] = true
				}
				created[i] = newRows[k]
				ms = append(ms, spanner.InsertOrUpdate(tableReactions, cols, vals))
				states[k] = stored{state: tr.Next, shares: shares, tallied: spanner.NullBool{Bool: !flagged[r.UserID], Valid: true}}
			}
		}
		summed, sms := box.finish(now)
		for i, key := range summedFor {
			if ev, ok := summed[key]; ok && key != "" {
				results[i].Event = ev
			}
		}
		ms = append(ms, sms...)
		tms, err := tallyMutations(ctx, tx, tallies)
		if err != nil {
			return err
		}
		ms = append(ms, tms...)
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return nil, fmt.Errorf("reactionstore.SetMany: %w", err)
	}
	for i := range results {
		if results[i].Err == nil && results[i].UpdateTime.IsZero() {
			results[i].UpdateTime = commitTS
		}
		if created[i] {
			results[i].State.Created = commitTS
		}
		results[i].CommitTime = commitTS
	}
	return results, nil
}

// maxShares bounds the shares one reaction row holds (one per transaction
// of its user on its item not yet counted: many only while the consumer is
// behind); a change beyond it writes an outbox row of the user's own.
const maxShares = 16

// summedOutbox is the outbox of one SetMany transaction: one summed row per
// item, and the summed rows of earlier transactions that shares are taken
// out of.
type summedOutbox struct {
	batch string
	// keys, sums and refs are this transaction's summed rows: the item, the
	// deltas summed, how many shares are part of it.
	keys  []string
	sums  []counter.Values
	refs  []int
	byKey map[string]int
	// earlier holds the summed rows of earlier transactions the stored
	// shares are part of, as they are now; changed marks those to write.
	earlier map[outboxstore.RowKey]counter.Values
	changed map[outboxstore.RowKey]bool
}

// pending returns the shares whose summed row is still pending.
func (b *summedOutbox) pending(shares []outboxstore.Share) []outboxstore.Share {
	var out []outboxstore.Share
	for _, sh := range shares {
		if _, ok := b.earlier[sh.RowKey()]; ok {
			out = append(out, sh)
		}
	}
	return out
}

// add puts v, a change of one user on key, in this transaction's summed
// row of key and returns the user's shares with it.
func (b *summedOutbox) add(shares []outboxstore.Share, key string, v counter.Values) []outboxstore.Share {
	i, ok := b.byKey[key]
	if !ok {
		i = len(b.keys)
		b.byKey[key] = i
		b.keys, b.sums, b.refs = append(b.keys, key), append(b.sums, counter.Values{}), append(b.refs, 0)
	}
	b.sums[i] = b.sums[i].Plus(v)
	id := outboxstore.SummedID(b.batch, i)
	out := append([]outboxstore.Share(nil), shares...)
	for j := range out {
		if out[j].EventID == id {
			out[j].Values = out[j].Values.Plus(v)
			return out
		}
	}
	b.refs[i]++
	return append(out, outboxstore.Share{EventID: id, Key: key, Values: v})
}

// takeOut removes a share from its summed row, this transaction's or an
// earlier one's.
func (b *summedOutbox) takeOut(sh outboxstore.Share) {
	if i, ok := b.byKey[sh.Key]; ok && sh.EventID == outboxstore.SummedID(b.batch, i) {
		b.sums[i] = b.sums[i].Minus(sh.Values)
		b.refs[i]--
		return
	}
	k := sh.RowKey()
	b.earlier[k] = b.earlier[k].Minus(sh.Values)
	if b.changed == nil {
		b.changed = map[outboxstore.RowKey]bool{}
	}
	b.changed[k] = true
}

// republish returns the events of the earlier summed rows of shares.
func (b *summedOutbox) republish(shares []outboxstore.Share) []events.Event {
	var out []events.Event
	for _, sh := range shares {
		if v, ok := b.earlier[sh.RowKey()]; ok {
			out = append(out, outboxstore.RowEvent(sh.RowKey(), v))
		}
	}
	return out
}

// finish returns this transaction's summed events by item and the outbox
// mutations: a summed row for every item some share is part of or whose sum
// moved, and the earlier rows shares were taken out of.
func (b *summedOutbox) finish(now time.Time) (map[string]*events.Event, []*spanner.Mutation) {
	evs := map[string]*events.Event{}
	var ms []*spanner.Mutation
	for i, key := range b.keys {
		if b.refs[i] == 0 && b.sums[i].IsZero() {
			continue
		}
		id := outboxstore.SummedID(b.batch, i)
		ev := outboxstore.RowEvent(outboxstore.RowKey{EventID: id, Key: key}, b.sums[i])
		ev.Time = now
		evs[key] = &ev
		ms = append(ms, outboxstore.Summed(id, key, b.sums[i]))
	}
	for k := range b.changed {
		ms = append(ms, outboxstore.UpdateSummed(k, b.earlier[k]))
	}
	return evs, ms
}

// Get returns the user's reactions on ids in one read; items without one are
// none (Tag 0).
func (s *Store) Get(ctx context.Context, userID string, ids []string) (map[string]reaction.State, error) {
	out := make(map[string]reaction.State, len(ids))
	var keys []spanner.Key
	for _, id := range ids {
		out[id] = reaction.State{Reaction: reaction.None}
		keys = append(keys, spanner.Key{userID, id})
	}
	err := s.db.Single().Read(ctx, tableReactions, spanner.KeySetFromKeys(keys...),
		[]string{"ContentId", "Reaction", "Version", "Generation", "CreateTime"}).Do(func(r *spanner.Row) error {
		var id, kind string
		var st reaction.State
		var createTime spanner.NullTime
		if err := r.Columns(&id, &kind, &st.Version, &st.Generation, &createTime); err != nil {
			return err
		}
		st.Reaction, st.Created = reaction.Kind(kind), createTime.Time
		out[id] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reactionstore.Get: %w", err)
	}
	return out, nil
}

func queryKeys(ctx context.Context, tx *spanner.ReadOnlyTransaction, stmt spanner.Statement) ([]string, error) {
	var out []string
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var k string
		if err := r.Columns(&k); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	return out, err
}
