package outboxstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/events"
)

// Outbox batches. A writer that records many changes in one transaction
// (group commit) gives their outbox events ids that start with one random
// batch id, so that the batch's PendingDeltas rows are one contiguous key
// range (EventId is the first key column). The consumer that counts the
// whole batch deletes that range: one mutation for the message instead of
// one per event. Rows of a batch whose events are not all in the message
// being applied (a batch split over messages, or a relay of some of it) are
// deleted one by one, as unbatched rows are.
const (
	batchIDLen = 16  // hex digits of the random batch id
	batchSep   = '~' // after the batch id; outside the hex and id alphabets
)

// NewBatch returns a random batch id for the outbox events of one
// transaction.
func NewBatch() string {
	var b [batchIDLen / 2]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// BatchedID is the id of event id in outbox batch batch.
func BatchedID(batch, id string) string { return batch + string(batchSep) + id }

// outboxBatch returns the batch of an outbox event id, if it has one.
func outboxBatch(id string) (string, bool) {
	if len(id) <= batchIDLen || id[batchIDLen] != batchSep {
		return "", false
	}
	for _, c := range id[:batchIDLen] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return id[:batchIDLen], true
}

// batchRange is the key range of every PendingDeltas row of batch.
func batchRange(batch string) spanner.KeyRange {
	return spanner.KeyRange{
		Start: spanner.Key{batch + string(batchSep)},
		End:   spanner.Key{batch + string(batchSep+1)},
		Kind:  spanner.ClosedOpen,
	}
}

// takeOutbox counts the outbox events evs (all with Outbox set) in tx: it
// adds the values of their PendingDeltas rows that still exist to sums and
// returns the mutations deleting those rows, with how many events were
// found (applied) and not found (counted before: duplicates).
func takeOutbox(ctx context.Context, tx *spanner.ReadWriteTransaction, evs []events.Event, sums map[string]counter.Values) (ms []*spanner.Mutation, applied, duplicates int, err error) {
	inMessage := make(map[string]bool, len(evs))
	batches := map[string]bool{}
	var sets []spanner.KeySet
	for _, e := range evs {
		inMessage[e.ID] = true
		if b, ok := outboxBatch(e.ID); ok {
			if !batches[b] {
				batches[b] = true
				sets = append(sets, batchRange(b))
			}
			continue
		}
		sets = append(sets, spanner.Key{e.ID}.AsPrefix())
	}
	type row struct{ id, key string }
	var rows []row
	found := map[string]bool{}
	// whole: the batches of which rows were found, each true while every
	// row read of it belongs to an event in the message.
	whole := make(map[string]bool, len(batches))
	err = tx.Read(ctx, counterdb.Pending, spanner.KeySets(sets...), pendingColumns).Do(func(r *spanner.Row) error {
		var id, key string
		if err := counterdb.Columns(r, &id, &key); err != nil {
			return err
		}
		b, batched := outboxBatch(id)
		if batched {
			if _, ok := whole[b]; !ok {
				whole[b] = true
			}
		}
		if !inMessage[id] {
			// Another event of a batch in the message: not counted now.
			if batched {
				whole[b] = false
			}
			return nil
		}
		v, err := counterdb.ReadValues(r, 2)
		if err != nil {
			return err
		}
		sums[key] = sums[key].Plus(v)
		found[id] = true
		rows = append(rows, row{id, key})
		return nil
	})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read outbox: %w", err)
	}
	for b, all := range whole {
		if all {
			ms = append(ms, spanner.Delete(counterdb.Pending, batchRange(b)))
		}
	}
	for _, r := range rows {
		if b, ok := outboxBatch(r.id); ok && whole[b] {
			continue
		}
		ms = append(ms, spanner.Delete(counterdb.Pending, spanner.Key{r.id, r.key}))
	}
	return ms, len(found), len(evs) - len(found), nil
}

// Summed outbox rows and their shares. A transaction that records many
// users' changes on one counter (a hot item's group commit) writes one
// PendingDeltas row per counter, the deltas summed and no UserId, instead of
// one per change: a change then costs its source row and nothing more. Each
// author's part of a summed row (their share) is kept on their own source
// row (a reaction row's PendingShares), so the author's reads still add
// exactly their own pending changes: a share counts as pending while the
// summed row it names exists at the read's timestamp, and the consumer
// deletes that row in the transaction that counts it. Every other reader
// of the outbox (the consumer, reconciliation's pending sums, the relay)
// reads a summed row as any other row.

// Share is one author's part of a summed outbox row: the row (EventID,
// Key) and the deltas the author's changes put in it.
type Share struct {
	EventID string
	Key     string
	Values  counter.Values
}

// sharedFieldsV1 is how many values the first entries held (likes to views).
const sharedFieldsV1 = 5

// ShareSep separates the fields of a share's stored entry (the counts reads
// split entries in SQL); it is in neither the event id alphabet nor a
// decimal number.
const ShareSep = "/"

// SummedID is the event id of the summed row of the i-th counter of outbox
// batch batch.
func SummedID(batch string, i int) string { return BatchedID(batch, "s"+strconv.Itoa(i)) }

// Entry is the share as stored on its author's row:
// "<event id>/<likes>/<dislikes>/<comments>/<replies>/<views>[/<threads>]",
// the values in the order of counter.Fields; zeros past the first five are
// left out, so that an entry keeps the form every reader knows.
func (s Share) Entry() string {
	var b strings.Builder
	b.WriteString(s.EventID)
	vals := s.Values.Slice()
	for len(vals) > sharedFieldsV1 && vals[len(vals)-1] == 0 {
		vals = vals[:len(vals)-1]
	}
	for _, n := range vals {
		b.WriteString(ShareSep)
		b.WriteString(strconv.FormatInt(n, 10))
	}
	return b.String()
}

// ParseShare reads a stored entry of the row of counter key. An entry
// written before the last fields existed lacks them: they are zero.
func ParseShare(key, entry string) (Share, error) {
	parts := strings.Split(entry, ShareSep)
	if len(parts) < 1+sharedFieldsV1 || len(parts) > 1+len(counterdb.ValueColumns) || parts[0] == "" {
		return Share{}, fmt.Errorf("outboxstore: bad outbox share %q", entry)
	}
	ns := make([]int64, len(counterdb.ValueColumns))
	for i, p := range parts[1:] {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return Share{}, fmt.Errorf("outboxstore: bad outbox share %q", entry)
		}
		ns[i] = n
	}
	return Share{EventID: parts[0], Key: key, Values: counter.FromSlice(ns)}, nil
}

// ParseShares reads the stored entries of the row of counter key.
func ParseShares(key string, entries []string) ([]Share, error) {
	out := make([]Share, 0, len(entries))
	for _, e := range entries {
		s, err := ParseShare(key, e)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Entries is the stored form of shares (nil for none: a NULL column).
func Entries(shares []Share) []string {
	if len(shares) == 0 {
		return nil
	}
	out := make([]string, len(shares))
	for i, s := range shares {
		out[i] = s.Entry()
	}
	return out
}

// RowKey is the PendingDeltas key of a row.
type RowKey struct{ EventID, Key string }

// RowKey is the key of the summed row the share is part of.
func (s Share) RowKey() RowKey { return RowKey{s.EventID, s.Key} }

// Summed returns the mutation inserting the summed outbox row id of counter
// key with values v.
func Summed(id, key string, v counter.Values) *spanner.Mutation {
	return pendingRow(id, key, spanner.NullString{}, v)
}

// UpdateSummed returns the mutation setting the values of the existing
// summed row k to v: an author's share taken out before it is counted.
func UpdateSummed(k RowKey, v counter.Values) *spanner.Mutation {
	cols, vals := counterdb.WithValues([]string{"EventId", "CounterKey"}, []any{k.EventID, k.Key}, v)
	return spanner.Update(counterdb.Pending, cols, vals)
}

// pendingColumns are the columns a PendingDeltas row is read with:
// readPending decodes them.
var pendingColumns = append([]string{"EventId", "CounterKey"}, counterdb.ValueColumns...)

// readPending is the key and values of a PendingDeltas row read with
// pendingColumns.
func readPending(r *spanner.Row) (RowKey, counter.Values, error) {
	var k RowKey
	if err := counterdb.Columns(r, &k.EventID, &k.Key); err != nil {
		return RowKey{}, counter.Values{}, err
	}
	v, err := counterdb.ReadValues(r, 2)
	return k, v, err
}

// ReadRows returns the values of the PendingDeltas rows keys that exist at
// tx's timestamp (a share's row missing: counted, or taken out).
func ReadRows(ctx context.Context, tx interface {
	Read(context.Context, string, spanner.KeySet, []string) *spanner.RowIterator
}, keys []RowKey) (map[RowKey]counter.Values, error) {
	out := make(map[RowKey]counter.Values, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	ks := make([]spanner.Key, len(keys))
	for i, k := range keys {
		ks[i] = spanner.Key{k.EventID, k.Key}
	}
	err := tx.Read(ctx, counterdb.Pending, spanner.KeySetFromKeys(ks...), pendingColumns).Do(func(r *spanner.Row) error {
		k, v, err := readPending(r)
		out[k] = v
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxstore.ReadRows: %w", err)
	}
	return out, nil
}

// ReadCounterRows returns the values of every PendingDeltas row of the
// counters ids at tx's timestamp, at most limit rows (0: all), read by key
// from the index by counter, and how many it read: a reader that does not
// yet know which rows it needs reads them all at once, and the rows it
// needs are complete unless n reached limit.
func ReadCounterRows(ctx context.Context, tx *spanner.ReadOnlyTransaction, ids []string, limit int) (rows map[RowKey]counter.Values, n int, err error) {
	rows = map[RowKey]counter.Values{}
	if len(ids) == 0 {
		return rows, 0, nil
	}
	opts := &spanner.ReadOptions{Index: counterdb.PendingByCounter, Limit: limit}
	err = tx.ReadWithOptions(ctx, counterdb.Pending, counterdb.PrefixSet(ids), pendingColumns, opts).Do(func(r *spanner.Row) error {
		k, v, err := readPending(r)
		rows[k] = v
		n++
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("outboxstore.ReadCounterRows: %w", err)
	}
	return rows, n, nil
}

// RowEvent is the outbox event of the row k holding v: what the relay and a
// retry's republish send.
func RowEvent(k RowKey, v counter.Values) events.Event {
	return events.Event{ID: k.EventID, Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas(k.Key, v)}
}

// maxRelay bounds the events one relay pass republishes.
const maxRelay = 5000

// Stale returns the outbox events older than age (their message was lost, or
// is stuck): the rollup republishes them. A republished event that was in
// flight after all is a duplicate the consumer ignores.
func (s *Store) Stale(ctx context.Context, age time.Duration) ([]events.Event, error) {
	stmt := spanner.Statement{
		SQL: `SELECT EventId, CounterKey, UserId, CreateTime, ` + counterdb.ValueList + `
FROM PendingDeltas WHERE CreateTime < @before ORDER BY EventId LIMIT @limit`,
		Params: map[string]any{"before": s.now().Add(-age), "limit": int64(maxRelay * events.MaxDeltas)},
	}
	var out []events.Event
	idx := map[string]int{}
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var id, key string
		var user spanner.NullString
		var at time.Time
		if err := counterdb.Columns(r, &id, &key, &user, &at); err != nil {
			return err
		}
		v, err := counterdb.ReadValues(r, 4)
		if err != nil {
			return err
		}
		i, ok := idx[id]
		if !ok {
			if len(out) == maxRelay {
				return nil
			}
			i = len(out)
			idx[id] = i
			out = append(out, events.Event{ID: id, Kind: events.KindCounterDelta, Outbox: true, Time: at})
		}
		out[i].Deltas = append(out[i].Deltas, counter.Deltas(key, v)...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxstore.Stale: %w", err)
	}
	return out, nil
}

// PendingEvents returns the outbox events of one user on one counter: a
// client retrying a change whose publish failed re-publishes them. It reads
// the outbox's index by user under the (user, counter) prefix: a key read,
// where SQL naming the same keys costs the emulator a scan of the table.
func PendingEvents(ctx context.Context, tx interface {
	ReadUsingIndex(ctx context.Context, table, index string, keys spanner.KeySet, columns []string) *spanner.RowIterator
}, userID, key string) ([]events.Event, error) {
	it := tx.ReadUsingIndex(ctx, counterdb.Pending, counterdb.PendingByUser, spanner.Key{userID, key}.AsPrefix(), pendingColumns)
	var out []events.Event
	idx := map[string]int{}
	err := it.Do(func(r *spanner.Row) error {
		k, v, err := readPending(r)
		if err != nil {
			return err
		}
		i, ok := idx[k.EventID]
		if !ok {
			i = len(out)
			idx[k.EventID] = i
			out = append(out, events.Event{ID: k.EventID, Kind: events.KindCounterDelta, Outbox: true})
		}
		out[i].Deltas = append(out[i].Deltas, counter.Deltas(k.Key, v)...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxstore.PendingEvents: %w", err)
	}
	return out, nil
}

// Pending returns the outbox mutations that record the deltas of event ev,
// authored by userID ("" for none), in the transaction that makes the change.
func Pending(ev events.Event, userID string) []*spanner.Mutation {
	var ms []*spanner.Mutation
	var user spanner.NullString
	if userID != "" {
		user = spanner.NullString{StringVal: userID, Valid: true}
	}
	for key, v := range counter.Coalesce(ev.Deltas) {
		ms = append(ms, pendingRow(ev.ID, key, user, v))
	}
	return ms
}

// pendingRow inserts one outbox row. Only the fields it moves are written:
// an outbox row is inserted once, and the others default to 0 (fewer values
// for the client to encode on the hot path).
func pendingRow(id, key string, user spanner.NullString, v counter.Values) *spanner.Mutation {
	cols, vals := []string{"EventId", "CounterKey", "UserId", "CreateTime"}, []any{id, key, user, spanner.CommitTimestamp}
	for i, n := range v.Slice() {
		if n != 0 {
			cols, vals = append(cols, counterdb.ValueColumns[i]), append(vals, n)
		}
	}
	return spanner.Insert(counterdb.Pending, cols, vals)
}
