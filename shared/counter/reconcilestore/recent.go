package reconcilestore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter/internal/counterdb"
)

// The hourly reconciliation is a run of slices like the daily one, over the
// counters whose truth may have moved: those whose TruthHour (the hour of
// their last fold of a reconciled field, or of a flag change moving their
// tally) lies in the run's hours, listed in key order from the
// CountersByTruthHour index. A run covers the hours from the last hour of the
// previous hourly run through the current one, so consecutive runs overlap
// by an hour: a counter that moves again while a run lists its hour is in
// the next run's hours, and no hour is left out when a run is missed.

// MarkTruthMoved returns the mutations that set the TruthHour of the
// counters of keys to now's hour, for a change of their truth that no delta
// carries (a flag change moving a tally): the next hourly run checks them.
// Keys without a counter are left out (the daily run covers them).
func MarkTruthMoved(ctx context.Context, tx *spanner.ReadWriteTransaction, keys []string, now time.Time) ([]*spanner.Mutation, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ks := make([]spanner.Key, len(keys))
	for i, k := range keys {
		ks[i] = spanner.Key{k}
	}
	hour := counterdb.TruthHour(now)
	var ms []*spanner.Mutation
	err := tx.Read(ctx, counterdb.Counters, spanner.KeySetFromKeys(ks...), []string{"CounterKey", "TruthHour"}).Do(func(r *spanner.Row) error {
		var k string
		var h spanner.NullTime
		if err := r.Columns(&k, &h); err != nil {
			return err
		}
		if !h.Valid || !h.Time.Equal(hour) {
			ms = append(ms, spanner.Update(counterdb.Counters, []string{"CounterKey", "TruthHour"}, []any{k, hour}))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reconcilestore.MarkTruthMoved: %w", err)
	}
	return ms, nil
}

// StartRecentRun records an hourly run in n slices (DefaultSlices when
// n ≤ 0) over the hours from the previous hourly run's last hour (the hour
// before now when there is none) through now's, and returns its id.
func (s *Store) StartRecentRun(ctx context.Context, n int) (string, error) {
	to := counterdb.TruthHour(s.now())
	from := to.Add(-time.Hour)
	err := s.db.Single().Query(ctx, spanner.Statement{
		SQL: `SELECT MAX(ToHour) FROM ReconcileRuns WHERE ToHour IS NOT NULL`,
	}).Do(func(r *spanner.Row) error {
		var last spanner.NullTime
		if err := r.Columns(&last); err != nil {
			return err
		}
		if last.Valid && last.Time.Before(to) {
			from = last.Time
		} else if last.Valid {
			from = to
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reconcilestore.StartRecentRun: %w", err)
	}
	return s.startRun(ctx, n, &hours{from: from, to: to})
}

// hours are the TruthHours an hourly run covers, both included.
type hours struct{ from, to time.Time }

// truthMovedKeysAfter lists up to limit counters after `after` (up to upto
// when valid) whose TruthHour lies in h, in key order.
func truthMovedKeysAfter(ctx context.Context, tx *spanner.ReadOnlyTransaction, h hours, after string, upto spanner.NullString, limit int) ([]string, error) {
	sql := `SELECT CounterKey FROM Counters@{FORCE_INDEX=CountersByTruthHour, spanner_emulator.disable_query_null_filtered_index_check=true}
WHERE TruthHour >= @from AND TruthHour <= @to AND CounterKey > @after`
	params := map[string]any{"from": h.from, "to": h.to, "after": after, "limit": int64(limit)}
	if upto.Valid {
		sql += ` AND CounterKey <= @upto`
		params["upto"] = upto.StringVal
	}
	var out []string
	err := tx.Query(ctx, spanner.Statement{SQL: sql + ` ORDER BY CounterKey LIMIT @limit`, Params: params}).Do(func(r *spanner.Row) error {
		var k string
		if err := counterdb.Columns(r, &k); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list counters moved: %w", err)
	}
	return out, nil
}
