package counterstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
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

// NewOutboxBatch returns a random batch id for the outbox events of one
// transaction.
func NewOutboxBatch() string {
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
	cols := append([]string{"EventId", "CounterKey"}, valueColumns...)
	err = tx.Read(ctx, tablePending, spanner.KeySets(sets...), cols).Do(func(r *spanner.Row) error {
		var id, key string
		if err := columns(r, &id, &key); err != nil {
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
		v, err := readValues(r, 2)
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
			ms = append(ms, spanner.Delete(tablePending, batchRange(b)))
		}
	}
	for _, r := range rows {
		if b, ok := outboxBatch(r.id); ok && whole[b] {
			continue
		}
		ms = append(ms, spanner.Delete(tablePending, spanner.Key{r.id, r.key}))
	}
	return ms, len(found), len(evs) - len(found), nil
}
