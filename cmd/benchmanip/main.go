// Command benchmanip measures the automatic manipulation detection:
//
//  1. Precision and recall of moderation.DefaultParams over the generated
//     scenarios of moderationtest (thousands of ordinary accounts, heavy
//     users, a viral video, a channel's release, rings of several shapes),
//     and the detection's own time per scenario;
//  2. with -cost, the DetectManipulation job's cost per run on the Spanner
//     emulator: one scenario's hour written as reaction rows, then a run
//     over it and a second, incremental run with nothing new — Spanner
//     reads, commits and rows written (counted on the wire), rows read.
//
// Usage: go run ./cmd/benchmanip [-cost] [-ordinary 5000]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/videngage/engagement/cmd/internal/benchstack"
	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	"github.com/videngage/engagement/internal/moderationtest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func main() { benchstack.Main("benchmanip", realMain) }

func realMain(ctx context.Context) error {
	cost := flag.Bool("cost", false, "also measure the job's Spanner cost per run on the emulator")
	ordinary := flag.Int("ordinary", 5000, "ordinary accounts of the -cost population")
	flag.Parse()

	end := time.Now().UTC().Truncate(time.Minute)
	fmt.Printf("Precision and recall of the detection (moderation.DefaultParams), one hour of reactions per scenario\n\n")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "scenario\treactions\taccounts\tring accounts\tflagged\tprecision\trecall\tdetection time\t")
	for _, s := range moderationtest.Scenarios() {
		w := s.Population.Generate(end)
		started := time.Now()
		gs, st, err := moderation.DefaultParams.Detect(w.Reactions, w.FirstSeenOf)
		if err != nil {
			return err
		}
		took := time.Since(started)
		sc := w.ScoreOf(gs)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%v\t\n", s.Name, st.Reactions, st.Accounts, sc.RingAccounts, sc.Flagged,
			sc.Precision(), sc.Recall(), took.Round(100*time.Microsecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !*cost {
		return nil
	}
	return measureCost(ctx, *ordinary)
}

func measureCost(ctx context.Context, ordinary int) error {
	w, err := benchstack.Start(ctx, "benchmanip", fmt.Sprintf("benchmanip-%d", time.Now().UnixNano()), nil)
	if err != nil {
		return err
	}
	defer w.Close()
	db, err := spannerdb.New(ctx, w.Config)
	if err != nil {
		return err
	}
	defer db.Client.Close()

	now := time.Now().UTC()
	pop := moderationtest.Scenarios()[4].Population // a ring of 200 beside a viral video
	pop.Ordinary = ordinary
	world := pop.Generate(now.Add(-30 * time.Minute))
	fmt.Fprintf(os.Stderr, "benchmanip: writing %d reactions…\n", len(world.Reactions))
	for _, ms := range world.Mutations(500) {
		if _, err := db.Client.Apply(spannerdb.Uncounted(ctx), ms); err != nil {
			return err
		}
	}
	h := detectmanipulationfn.New(detectmanipulationfn.Deps{Store: reactionstore.New(db), FirstLookback: 2 * time.Hour})
	fmt.Printf("\nThe job's cost per run on the Spanner emulator (%d reactions over the last 2 hours, %d ring accounts)\n\n", len(world.Reactions), len(world.Ring))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "run\tsteps\trows read (reactions)\tSpanner reads\tcommits\trows written\tflagged\ttime\t")
	for _, name := range []string{"first (2 h)", "next (nothing new)"} {
		before, started := otelcount.Global().Spanner(), time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/internal/detect-manipulation", strings.NewReader("{}")))
		took := time.Since(started)
		c := otelcount.Global().Spanner().Minus(before)
		if rec.Code != http.StatusOK {
			return fmt.Errorf("run: %d %s", rec.Code, rec.Body)
		}
		var rep detectmanipulationfn.Report
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t\n", name, rep.Steps, rep.Reactions, c.Reads, c.Commits, c.RowWrites, rep.Flagged, took.Round(time.Millisecond))
	}
	return tw.Flush()
}
