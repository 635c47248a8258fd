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
// The report goes to stdout and to docs/benchmarks/manipulation.md (-out),
// which it replaces.
//
// Usage: go run ./cmd/benchmanip [-cost] [-ordinary 5000] [-out docs/benchmarks/manipulation.md]
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
	"time"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/cmd/internal/benchstack"
	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	"github.com/videngage/engagement/internal/moderationtest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func main() { benchstack.Main("benchmanip", realMain) }

func realMain(ctx context.Context) error {
	cost := flag.Bool("cost", false, "also measure the job's Spanner cost per run on the emulator")
	ordinary := flag.Int("ordinary", 5000, "ordinary accounts of the -cost population")
	out := flag.String("out", "docs/benchmarks/manipulation.md", `write the report to this file too ("": stdout only)`)
	flag.Parse()
	stamp := benchreport.Start("")

	var b strings.Builder
	end := time.Now().UTC().Truncate(time.Minute)
	fmt.Fprintf(&b, "## Precision and recall of the detection\n\n"+
		"moderation.DefaultParams over the generated scenarios of moderationtest, one hour of reactions each; the detection time is this process's, one scenario at a time.\n\n")
	b.WriteString("| scenario | reactions | accounts | ring accounts | flagged | precision | recall | detection time |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range moderationtest.Scenarios() {
		w := s.Population.Generate(end)
		started := time.Now()
		gs, st, err := moderation.DefaultParams.Detect(w.Reactions, w.FirstSeenOf)
		if err != nil {
			return err
		}
		took := time.Since(started)
		sc := w.ScoreOf(gs)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.3f | %.3f | %v |\n", s.Name, st.Reactions, st.Accounts, sc.RingAccounts, sc.Flagged,
			sc.Precision(), sc.Recall(), took.Round(100*time.Microsecond))
	}
	if *cost {
		if err := measureCost(ctx, &b, *ordinary); err != nil {
			return err
		}
	}
	const title = "Manipulation detection"
	fmt.Print(stamp.Report(title, b.String()))
	if *out == "" {
		return nil
	}
	return stamp.Write(*out, title, b.String())
}

// measureCost appends the job's cost per run on the emulator to b.
func measureCost(ctx context.Context, b *strings.Builder, ordinary int) error {
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
	h := detectmanipulationfn.New(detectmanipulationfn.Deps{Store: detectmanipulationfn.Stores(reactionstore.New(db), moderationstore.New(db, moderationstore.Gate{})), FirstLookback: 2 * time.Hour})
	fmt.Fprintf(b, "\n## The job's cost per run on the Spanner emulator\n\n"+
		"%d reactions over the last 2 hours, %d ring accounts; Spanner work counted on the wire. The emulator runs one read-write transaction at a time, on a machine that may be shared (see uptime).\n\n", len(world.Reactions), len(world.Ring))
	b.WriteString("| run | steps | rows read (reactions) | Spanner reads | commits | rows written | flagged | time |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
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
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %d | %v |\n", name, rep.Steps, rep.Reactions, c.Reads, c.Commits, c.RowWrites, rep.Flagged, took.Round(time.Millisecond))
	}
	return nil
}
