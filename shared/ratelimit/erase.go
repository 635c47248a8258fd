package ratelimit

import (
	"context"
	"encoding/base64"

	"cloud.google.com/go/bigtable"
)

// Kinds are the kinds the functions count in rate_limits (the kind of every
// NewBigtable): the account erasure deletes each kind's rows of the user. A
// kind counted but not listed here keeps its rows until the family's GC (an
// hour).
var Kinds = []string{"history", "history-delete", "history-settings", "reactions", "comment-delete"}

// EraseUser deletes the user's rows of every kind in rate_limits: one
// prefix scan per kind (a user has one row per kind) and one bulk delete.
func EraseUser(ctx context.Context, c *bigtable.Client, userID string) error {
	t := c.Open(Table)
	var keys []string
	var muts []*bigtable.Mutation
	for _, kind := range Kinds {
		prefix := kind + "#" + base64.RawURLEncoding.EncodeToString([]byte(userID)) + "#"
		err := t.ReadRows(ctx, bigtable.PrefixRange(prefix), func(r bigtable.Row) bool {
			m := bigtable.NewMutation()
			m.DeleteRow()
			keys = append(keys, r.Key())
			muts = append(muts, m)
			return true
		}, bigtable.RowFilter(bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())))
		if err != nil {
			return unavailable("read rate limits", err)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	failed, err := t.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return unavailable("delete rate limits", err)
	}
	for _, e := range failed {
		if e != nil {
			return unavailable("delete rate limits", e)
		}
	}
	return nil
}
