package reactionstore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/reaction"
)

// Source is the reactions' side of reconciliation: likes and dislikes of
// the accounts not flagged. Truth reads the items' tallies (a few rows per
// item, however many reactions it has); the daily run audits the tallies
// against the reaction rows and repairs them. The flag changes reach the
// tallies through Store.ApplyFlags, which the hourly run calls first.
type Source struct{}

var _ reconcilestore.Auditor = Source{}

func (Source) Name() string { return "reactions" }

func (Source) Fields() []counter.Field { return []counter.Field{counter.Likes, counter.Dislikes} }

// KeysAfter lists, in order, up to limit items with a reaction after the
// given one: one range of the ReactionsByContent index.
func (Source) KeysAfter(ctx context.Context, tx *spanner.ReadOnlyTransaction, after string, limit int) ([]string, error) {
	return queryKeys(ctx, tx, spanner.Statement{
		SQL: `SELECT DISTINCT ContentId FROM Reactions@{FORCE_INDEX=ReactionsByContent}
WHERE ContentId > @after ORDER BY ContentId LIMIT @limit`,
		Params: map[string]any{"after": after, "limit": int64(limit)},
	})
}

// Truth reads the likes and dislikes of keys from their tallies. An item
// whose tally is not complete (no base row: some of its rows predate the
// tallies) is recounted from its rows in the same transaction.
func (Source) Truth(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error) {
	tallies, _, err := readTallies(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	var recounted []string
	for _, k := range keys {
		if _, ok := tallies[k]; !ok {
			recounted = append(recounted, k)
		}
	}
	out := map[string]counter.Values{}
	for k, v := range tallies {
		if !v.IsZero() {
			out[k] = v
		}
	}
	if len(recounted) == 0 {
		return out, nil
	}
	rows, err := Recount(ctx, tx, recounted)
	if err != nil {
		return nil, err
	}
	for k, v := range rows {
		out[k] = v
	}
	return out, nil
}

// Audit recounts keys from their rows: for an item whose tally is complete,
// the rows the tally holds (Tallied), which the flag changes that
// ApplyFlags has not reached yet do not move, so that the daily and the
// hourly runs agree; for the others, as Truth. It returns the guards (the
// base row's RepairTime) of the complete tallies.
func (Source) Audit(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, map[string]spanner.NullTime, error) {
	_, guards, err := readTallies(ctx, tx, keys)
	if err != nil {
		return nil, nil, err
	}
	var based, others []string
	for _, k := range keys {
		if _, ok := guards[k]; ok {
			based = append(based, k)
		} else {
			others = append(others, k)
		}
	}
	out := map[string]counter.Values{}
	if len(based) > 0 {
		if err := recount(ctx, tx, based, talliedRows, out); err != nil {
			return nil, nil, err
		}
	}
	if len(others) > 0 {
		if err := recount(ctx, tx, others, unflaggedRows, out); err != nil {
			return nil, nil, err
		}
	}
	return out, guards, nil
}

// Repair adds each fix to its item's base row where the base row's
// RepairTime is still the guard, and records readAt there.
func (Source) Repair(ctx context.Context, tx *spanner.ReadWriteTransaction, fixes map[string]counter.Values, guards map[string]spanner.NullTime, readAt time.Time) ([]*spanner.Mutation, []string, error) {
	var ks []spanner.Key
	for k := range fixes {
		ks = append(ks, spanner.Key{k, int64(baseShard)})
	}
	var ms []*spanner.Mutation
	var keys []string
	err := tx.Read(ctx, tableTallies, spanner.KeySetFromKeys(ks...), []string{"ContentId", "Likes", "Dislikes", "RepairTime"}).Do(func(r *spanner.Row) error {
		var k string
		var v counter.Values
		var t spanner.NullTime
		if err := r.Columns(&k, &v.Likes, &v.Dislikes, &t); err != nil {
			return err
		}
		g := guards[k]
		if t.Valid != g.Valid || t.Valid && !t.Time.Equal(g.Time) {
			return nil // repaired by another run meanwhile
		}
		v = v.Plus(fixes[k])
		ms = append(ms, spanner.Update(tableTallies, []string{"ContentId", "Shard", "Likes", "Dislikes", "RepairTime"},
			[]any{k, int64(baseShard), v.Likes, v.Dislikes, readAt}))
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return ms, keys, nil
}

// readTallies sums the tallies of keys; only complete ones (with a base
// row) are returned, with their base row's RepairTime.
func readTallies(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, map[string]spanner.NullTime, error) {
	out := map[string]counter.Values{}
	guards := map[string]spanner.NullTime{}
	stmt := spanner.Statement{
		SQL: `SELECT ContentId, SUM(Likes), SUM(Dislikes), COUNTIF(Shard = @base), MAX(IF(Shard = @base, RepairTime, NULL))
FROM ReactionTallies WHERE ContentId IN UNNEST(@ids) GROUP BY ContentId`,
		Params: map[string]any{"ids": keys, "base": int64(baseShard)},
	}
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var k string
		var v counter.Values
		var based int64
		var t spanner.NullTime
		if err := r.Columns(&k, &v.Likes, &v.Dislikes, &based, &t); err != nil {
			return err
		}
		if based > 0 {
			out[k], guards[k] = v, t
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read reaction tallies: %w", err)
	}
	return out, guards, nil
}

// Recount counts the likes and dislikes of keys from the reaction rows,
// leaving out flagged accounts: the truth of items whose tally is not
// complete, too costly for every hourly check of a viral item.
func Recount(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error) {
	out := map[string]counter.Values{}
	if err := recount(ctx, tx, keys, unflaggedRows, out); err != nil {
		return nil, err
	}
	return out, nil
}

// RecountTallied counts the likes and dislikes of keys from the rows their
// tallies hold (Tallied): what each complete tally must equal.
func RecountTallied(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error) {
	out := map[string]counter.Values{}
	if err := recount(ctx, tx, keys, talliedRows, out); err != nil {
		return nil, err
	}
	return out, nil
}

// The rows a recount counts.
const (
	unflaggedRows = `SELECT r.ContentId, r.Reaction, COUNT(*)
FROM Reactions@{FORCE_INDEX=ReactionsByContent} r
LEFT JOIN FlaggedUsers f ON f.UserId = r.UserId
WHERE r.ContentId IN UNNEST(@ids) AND (f.Flagged IS NULL OR f.Flagged = FALSE)
GROUP BY r.ContentId, r.Reaction`
	talliedRows = `SELECT ContentId, Reaction, COUNT(*)
FROM Reactions@{FORCE_INDEX=ReactionsByContent}
WHERE ContentId IN UNNEST(@ids) AND Tallied = TRUE
GROUP BY ContentId, Reaction`
)

// recount adds the likes and dislikes of keys counted by sql to out.
func recount(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string, sql string, out map[string]counter.Values) error {
	stmt := spanner.Statement{SQL: sql, Params: map[string]any{"ids": keys}}
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var id, kind string
		var n int64
		if err := r.Columns(&id, &kind, &n); err != nil {
			return err
		}
		v := reaction.Counted(reaction.Kind(kind))
		if v.IsZero() {
			return fmt.Errorf("reaction row of %s holds %q", id, kind)
		}
		v.Likes *= n
		v.Dislikes *= n
		out[id] = out[id].Plus(v)
		return nil
	})
	if err != nil {
		return fmt.Errorf("recount reactions: %w", err)
	}
	return nil
}
