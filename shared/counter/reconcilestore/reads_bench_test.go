package reconcilestore

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/spannerdb"
)

// BenchmarkBatchReads times one reconciliation batch's reads of the
// counters as the table grows, each as the SQL query it used to be
// (before) and as the key reads it is (after), side by side: on the
// emulator every query scans the table, the key reads seek. Rerun with
//
//	go run ./cmd/withemulators -- go test -run '^$' -bench BatchReads -benchtime 1x ./shared/counter/reconcilestore/
func BenchmarkBatchReads(b *testing.B) {
	ctx := context.Background()
	db := emulatortest.Spanner(b, emulatortest.New(b))
	// The slice of a 64-slice run in the middle of the key space, and the
	// first batch of keys from its start.
	bounds := sliceBounds(DefaultSlices)
	after, upto := bounds[32], spanner.NullString{StringVal: bounds[33], Valid: true}
	var keys []string
	sql := func(stmt string, params map[string]any) func(tx *spanner.ReadOnlyTransaction) error {
		return func(tx *spanner.ReadOnlyTransaction) error {
			return tx.Query(ctx, spanner.Statement{SQL: stmt, Params: params}).Do(func(*spanner.Row) error { return nil })
		}
	}
	forms := []struct {
		name string
		run  func(tx *spanner.ReadOnlyTransaction) error
	}{
		{"list-page/sql", func(tx *spanner.ReadOnlyTransaction) error {
			return sql(`SELECT CounterKey FROM Counters WHERE CounterKey > @after ORDER BY CounterKey LIMIT @limit`,
				map[string]any{"after": after, "limit": int64(slicePage)})(tx)
		}},
		{"list-page/read", func(tx *spanner.ReadOnlyTransaction) error {
			_, err := counterKeysAfter(ctx, tx, after, upto, slicePage)
			return err
		}},
		{"counted/sql", func(tx *spanner.ReadOnlyTransaction) error {
			return sql(`SELECT CounterKey, Likes, Dislikes, Comments, Replies, Views FROM Counters WHERE CounterKey IN UNNEST(@ids)
UNION ALL SELECT CounterKey, Likes, Dislikes, Comments, Replies, Views FROM CounterShards WHERE CounterKey IN UNNEST(@ids)`,
				map[string]any{"ids": keys})(tx)
		}},
		{"counted/read", func(tx *spanner.ReadOnlyTransaction) error {
			_, _, err := counterdb.Counted(ctx, tx, keys)
			return err
		}},
		{"pending/sql", func(tx *spanner.ReadOnlyTransaction) error {
			return sql(`SELECT CounterKey, Likes, Dislikes, Comments, Replies, Views
FROM PendingDeltas@{FORCE_INDEX=PendingDeltasByCounter} WHERE CounterKey IN UNNEST(@ids)`, map[string]any{"ids": keys})(tx)
		}},
		{"pending/read", func(tx *spanner.ReadOnlyTransaction) error {
			_, err := counterdb.PendingSums(ctx, tx, keys)
			return err
		}},
	}
	have := 0
	for _, n := range []int{5_000, 20_000, 100_000} {
		if err := generateCounters(ctx, db, have, n); err != nil {
			b.Fatal(err)
		}
		have = n
		err := db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
			var err error
			keys, err = counterKeysAfter(ctx, tx, after, spanner.NullString{}, reconcileBatch)
			return err
		})
		if err != nil || len(keys) < reconcileBatch {
			b.Fatalf("first batch: %d keys, %v", len(keys), err)
		}
		for _, f := range forms {
			b.Run(fmt.Sprintf("counters=%d/%s", n, f.name), func(b *testing.B) {
				for b.Loop() {
					if err := db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error { return f.run(tx) }); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// generateCounters writes counters lo..hi-1 spread over the key space, 25
// to a commit (the emulator's commits slow down faster than linearly with
// their mutations).
func generateCounters(ctx context.Context, db *spannerdb.DB, lo, hi int) error {
	for i := lo; i < hi; i += 25 {
		var ms []*spanner.Mutation
		for j := i; j < min(i+25, hi); j++ {
			h := uint64(j) * 0x9E3779B97F4A7C15
			k := fmt.Sprintf("%c%c%08d", keyAlphabet[h>>58], keyAlphabet[(h>>52)&63], j)
			ms = append(ms, spanner.Insert(counterdb.Counters, []string{"CounterKey"}, []any{k}))
		}
		if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return tx.BufferWrite(ms) }); err != nil {
			return err
		}
	}
	return nil
}
