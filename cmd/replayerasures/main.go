// Command replayerasures asks again, after a restore of Spanner, Firestore
// or Bigtable, for every account erasure asked for since the restore point
// (cmd/internal/erasurereplay): the erasure log, kept in a bucket no
// restore rolls back, says whose. It is the last step of every restore
// (docs/operations.md, "Restoring a database").
//
// It reads the environment the functions read (GOOGLE_CLOUD_PROJECT,
// SPANNER_INSTANCE, SPANNER_DATABASE, FIRESTORE_DATABASE, ERASURE_TOPIC,
// ERASURE_LOG_BUCKET, and the emulators' *_EMULATOR_HOST) and runs with
// the operator's credentials.
//
// Usage:
//
//	replayerasures -restored-to TIME [-open-for 24h] [-dry-run] [-wait 30m]
//	replayerasures -all [-dry-run] [-wait 30m]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/cmd/internal/erasurereplay"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/config"
)

func main() {
	cmdmain.Run("replayerasures", func(ctx context.Context) error { return realMain(ctx, os.Args[1:], os.Stdout) })
}

func realMain(ctx context.Context, args []string, out io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	o.Out = out
	cfg, err := config.FromEnv(ctx)
	if err != nil {
		return err
	}
	c, err := host.New(ctx, cfg, erasurereplay.Needs)
	if err != nil {
		return err
	}
	defer c.Close()
	deps, stop := erasurereplay.DepsFrom(c)
	defer stop()
	_, err = erasurereplay.Run(ctx, deps, o)
	return err
}

// parse reads the command line: the replay starts -open-for before the
// restore point (an erasure open then may have removed part of a store's
// data before it and part after), or at the log's first entry with -all.
func parse(args []string) (erasurereplay.Options, error) {
	fs := flag.NewFlagSet("replayerasures", flag.ContinueOnError)
	restoredTo := fs.String("restored-to", "", "the earliest point in time any store was restored to (RFC 3339, e.g. 2026-12-03T10:00:00Z)")
	openFor := fs.Duration("open-for", 24*time.Hour, "how long before the restore point the replay starts: longer than any erasure stays open")
	all := fs.Bool("all", false, "replay the whole log (every entry still kept) instead of -restored-to")
	var o erasurereplay.Options
	fs.BoolVar(&o.DryRun, "dry-run", false, "read the log and say how many erasures would be asked for again")
	fs.DurationVar(&o.Wait, "wait", 0, "wait this long for every replayed erasure to be done (0: do not wait)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 || (*restoredTo == "") == !*all || *openFor < 0 || o.Wait < 0 {
		return o, errors.New("want exactly one of -restored-to TIME and -all, -open-for ≥ 0, -wait ≥ 0, and no arguments")
	}
	if *all {
		return o, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *restoredTo)
	if err != nil {
		return o, fmt.Errorf("-restored-to: %w", err)
	}
	o.Since = t.Add(-*openFor)
	return o, nil
}
