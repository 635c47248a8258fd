package main

// The count rows section (-only countrows): the Spanner rows and bytes one
// counts read costs, read from the store as the Counts function reads it
// when it holds none of the ids (its worst case): anonymous
// (countstore.Public) and signed in (countstore.OwnMany, strongly), for 1,
// 10 and 50 ids, hot (live shard rows and other users' pending outbox rows)
// and cold (folded into the snapshot, nothing live). Counted on the wire
// (spannerdb's interceptors), so the figures do not depend on the load.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/cmd/internal/benchstack"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
)

// The world of the section: countRowsIDs hot and as many cold ids; on each
// hot id countRowsOthers other users' pending changes; the viewer's
// reactions on countRowsReactions other items (fewer than a read once took
// as one key range), and a pending change of their own on every other hot
// id.
var countRowsOut = flag.String("countrows-out", "", "count rows benchmark: also write the report to this file (docs/benchmarks/count-rows.md)")

const (
	countRowsIDs       = 50
	countRowsOthers    = 20
	countRowsReactions = 60
	countRowsRepeats   = 10
	countRowsViewer    = "viewer"
)

func runCountRowsBench(ctx context.Context, out string) error {
	otelcount.Global()
	stamp := benchreport.Start("go run ./cmd/withemulators -- go run ./cmd/bench -only countrows -countrows-out docs/benchmarks/count-rows.md")
	w, err := benchstack.Start(ctx, "bench", fmt.Sprintf("bench-countrows-%d", os.Getpid()), nil)
	if err != nil {
		return err
	}
	defer w.Close()
	db := w.DB
	outbox, folds, store := outboxstore.New(db), foldstore.New(db, foldstore.Options{}), countstore.New(db)
	hot, cold := make([]string, countRowsIDs), make([]string, countRowsIDs)
	for i := range countRowsIDs {
		hot[i], cold[i] = fmt.Sprintf("hot-%02d", i), fmt.Sprintf("cold-%02d", i)
	}
	like := func(id, user string) events.Event {
		return events.Event{ID: events.ID("bench", id, user), Kind: events.KindCounterDelta, Deltas: []counter.Delta{{Key: id, Field: counter.Likes, N: 1}}}
	}
	// Cold ids: counted, then folded.
	var evs []events.Event
	for _, id := range cold {
		evs = append(evs, like(id, "a"), like(id, "b"))
	}
	if _, err := outbox.Apply(ctx, evs); err != nil {
		return err
	}
	if _, err := folds.Fold(ctx); err != nil {
		return err
	}
	// Hot ids: counted into live shards (several applies, several shards),
	// with other users' and the viewer's changes pending.
	for round := range counter.MinShards * 2 {
		evs = evs[:0]
		for _, id := range hot {
			evs = append(evs, like(id, fmt.Sprint("r", round)))
		}
		if _, err := outbox.Apply(ctx, evs); err != nil {
			return err
		}
	}
	var ms []*spanner.Mutation
	for i, id := range hot {
		for u := range countRowsOthers {
			ms = append(ms, outboxstore.Pending(like(id, fmt.Sprint("other-", u)), fmt.Sprint("other-", u))...)
		}
		if i%2 == 1 {
			ms = append(ms, outboxstore.Pending(like(id, countRowsViewer), countRowsViewer)...)
		}
	}
	for i := range countRowsReactions {
		ms = append(ms, spanner.Insert("Reactions", []string{"UserId", "ContentId", "Reaction", "Version", "Generation", "UpdateTime"},
			[]any{countRowsViewer, fmt.Sprintf("elsewhere-%03d", i), "like", int64(1), int64(i), spanner.CommitTimestamp}))
	}
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return tx.BufferWrite(ms) }); err != nil {
		return err
	}

	var b strings.Builder
	fmt.Fprintf(&b, "One counts read of n ids as the Counts function makes it when it holds none of them (the store's calls: `countstore.Public` anonymous, `countstore.OwnMany` signed in, strongly, without a Session-Token), %d times each, on a world of its own: hot ids have %d live shard rows each and %d other users' pending outbox rows; every second hot id one of the viewer's own; cold ids are folded into their snapshots; the viewer has reactions on %d other items. Spanner work counted on the wire (spannerdb's interceptors): counts, not times, so the machine's load does not change them.\n\n",
		countRowsRepeats, counter.MinShards, countRowsOthers, countRowsReactions)
	b.WriteString("| ids | kind | caller | read calls | rows read | bytes read |\n|---:|---|---|---:|---:|---:|\n")
	fmt.Println("\nCounts reads: Spanner work per request")
	for _, n := range []int{1, 10, 50} {
		for _, kind := range []struct {
			name string
			ids  []string
		}{{"hot", hot[:n]}, {"cold", cold[:n]}} {
			for _, caller := range []string{"anonymous", "signed in"} {
				read := func() error {
					if caller == "anonymous" {
						_, err := store.Public(ctx, kind.ids, 0)
						return err
					}
					_, err := store.OwnMany(ctx, []countstore.OwnQuery{{Viewer: countRowsViewer, IDs: kind.ids}})
					return err
				}
				if err := read(); err != nil { // warm: the store's own caches
					return err
				}
				before := otelcount.Global().Spanner()
				for range countRowsRepeats {
					if err := read(); err != nil {
						return err
					}
				}
				d := otelcount.Global().Spanner().Minus(before)
				per := func(x int64) float64 { return float64(x) / countRowsRepeats }
				line := fmt.Sprintf("| %d | %s | %s | %.1f | %.1f | %.0f |", n, kind.name, caller, per(d.Reads), per(d.RowsRead), per(d.BytesRead))
				fmt.Println(line)
				b.WriteString(line + "\n")
			}
		}
	}
	if out == "" {
		return nil
	}
	return stamp.Write(out, "Rows and bytes one counts read costs", b.String())
}
