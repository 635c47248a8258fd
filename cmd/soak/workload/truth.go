package workload

import (
	"context"

	"cloud.google.com/go/spanner"

	reconcilefn "github.com/videngage/engagement/functions/reconcile"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Truth recounts the fields of keys that have a source of truth in Spanner
// (those reconciliation checks: likes and dislikes from the reactions,
// comments and replies from the comments), at one timestamp.
func Truth(ctx context.Context, db *spannerdb.DB, keys []string) (map[string]counter.Values, error) {
	truth := map[string]counter.Values{}
	err := db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		for _, src := range reconcilefn.Sources() {
			got, err := src.Truth(ctx, tx, keys)
			if err != nil {
				return err
			}
			for k, v := range got {
				truth[k] = truth[k].Plus(v.Only(src.Fields()))
			}
		}
		return nil
	})
	return truth, err
}

// TruthFields are the fields Truth recounts.
func TruthFields() []counter.Field {
	var out []counter.Field
	for _, src := range reconcilefn.Sources() {
		out = append(out, src.Fields()...)
	}
	return out
}
