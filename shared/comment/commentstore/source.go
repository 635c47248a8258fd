package commentstore

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
)

// Source is the comments' side of reconciliation: a video's comments are its
// visible top-level comments plus their visible replies, its threads its
// visible top-level comments, a comment's replies its visible direct replies
// while it is visible itself. Register it with
// reconcilestore.Store.Reconcile next to the reactions' source.
type Source struct{}

var _ reconcilestore.Source = Source{}

func (Source) Name() string { return "comments" }

func (Source) Fields() []counter.Field { return tallied }

// KeysAfter lists, in order, up to limit keys after the given one whose
// truth is not zero: videos with a visible comment and comments with a
// visible reply, from their tallies. A key whose truth fell to zero is left
// out; it has a counter, which the Counters listing covers.
func (Source) KeysAfter(ctx context.Context, tx *spanner.ReadOnlyTransaction, after string, limit int) ([]string, error) {
	var out []string
	stmt := spanner.Statement{
		SQL: `SELECT CounterKey FROM CommentTallies WHERE CounterKey > @after
GROUP BY CounterKey HAVING SUM(Comments) != 0 OR SUM(Replies) != 0 OR SUM(Threads) != 0
ORDER BY CounterKey LIMIT @limit`,
		Params: map[string]any{"after": after, "limit": int64(limit)},
	}
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var k string
		if err := r.Columns(&k); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list commented keys: %w", err)
	}
	return out, nil
}

// Truth reads the comments, replies and threads of keys (each may be a video
// or a comment id) from their tallies: the few rows each, not a count of the
// listing indexes. A key whose tally has not started (no base row: its
// comments predate the tallies and none was written since) is recounted
// from the listing indexes, in the same transaction, so reconciliation is
// exact before any backfill; so are the threads of a tally whose threads
// have not started.
func (Source) Truth(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error) {
	out := map[string]counter.Values{}
	start := map[string]unstarted{}
	for _, k := range keys {
		start[k] = unstarted{base: true, threads: true}
	}
	stmt := spanner.Statement{
		SQL: `SELECT CounterKey, SUM(Comments), SUM(Replies), SUM(Threads), COUNTIF(Shard = @base), COUNTIF(Shard = @threads)
FROM CommentTallies WHERE CounterKey IN UNNEST(@ids) GROUP BY CounterKey`,
		Params: map[string]any{"ids": keys, "base": int64(baseShard), "threads": int64(threadsBaseShard)},
	}
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var k string
		var v counter.Values
		var base, threads int64
		if err := r.Columns(&k, &v.Comments, &v.Replies, &v.Threads, &base, &threads); err != nil {
			return err
		}
		out[k], start[k] = v, unstarted{base: base == 0, threads: threads == 0}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read comment tallies: %w", err)
	}
	var recounted []string
	for _, k := range keys {
		if u := start[k]; u.base || u.threads {
			recounted = append(recounted, k)
		}
	}
	if len(recounted) == 0 {
		return out, nil
	}
	truth, err := recount(ctx, tx, recounted)
	if err != nil {
		return nil, err
	}
	for _, k := range recounted {
		v := out[k]
		if start[k].base {
			v = truth[k]
		} else {
			v.Threads = truth[k].Threads
		}
		if v.IsZero() {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out, nil
}

// Truth sources of one row of the recount.
const (
	truthTopLevel = 0 // visible top-level comments of a video
	truthReplies  = 1 // visible replies of a video's visible top-level comments
	truthDirect   = 2 // visible replies of a visible comment
)

// querier is a transaction of either kind.
type querier interface {
	Query(ctx context.Context, stmt spanner.Statement) *spanner.RowIterator
}

// Recount counts the comments, replies and threads of keys from the listing
// indexes, which hold visible comments only: the audit of the tallies
// (tests, the backfill), too costly for every reconciliation of a viral
// video.
func Recount(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error) {
	return recount(ctx, tx, keys)
}

func recount(ctx context.Context, tx querier, keys []string) (map[string]counter.Values, error) {
	out := map[string]counter.Values{}
	stmt := spanner.Statement{
		SQL: fmt.Sprintf(`SELECT %d AS Src, ListedVideoId AS CounterKey, COUNT(*) AS N
FROM `+fromCommentsByVideo+`
WHERE ListedVideoId IS NOT NULL AND ListedVideoId IN UNNEST(@ids) GROUP BY ListedVideoId
UNION ALL
SELECT %d, p.ListedVideoId, COUNT(*)
FROM `+fromCommentsByVideo+` p JOIN `+fromRepliesByParent+` r ON r.ListedParentId = p.CommentId
WHERE p.ListedVideoId IS NOT NULL AND r.ListedParentId IS NOT NULL AND p.ListedVideoId IN UNNEST(@ids) GROUP BY p.ListedVideoId
UNION ALL
SELECT %d, r.ListedParentId, COUNT(*)
FROM `+fromRepliesByParent+` r JOIN Comments p ON p.CommentId = r.ListedParentId
WHERE r.ListedParentId IS NOT NULL AND r.ListedParentId IN UNNEST(@ids) AND p.ListedVideoId IS NOT NULL GROUP BY r.ListedParentId`,
			truthTopLevel, truthReplies, truthDirect),
		Params: map[string]any{"ids": keys},
	}
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var src, n int64
		var k string
		if err := r.Columns(&src, &k, &n); err != nil {
			return err
		}
		v := out[k]
		switch src {
		case truthTopLevel:
			v.Comments += n
			v.Threads += n
		case truthReplies:
			v.Comments += n
		case truthDirect:
			v.Replies += n
		}
		out[k] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recount comments: %w", err)
	}
	return out, nil
}
