package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/telemetry"
)

// The reactions' CPU by load (-levels): the hot-item run at several counts
// of closed-loop clients, each with the mean group size G it reached (the
// reactions per group-commit transaction), and the least-squares fit
// CPU = a + b/G: a is what a reaction costs on its own, b what one group
// costs however many it carries.

// levelsOptions are the flags of the levels benchmark.
type levelsOptions struct {
	levels   string
	baseline bool
}

// levelResult is one hot-item run at one level.
type levelResult struct {
	writer    string
	clients   int
	reactions int
	groups    int64
	r         result
}

// groupSize is the mean reactions per group-commit transaction.
func (l levelResult) groupSize() float64 {
	if l.groups == 0 {
		return 0
	}
	return float64(l.reactions) / float64(l.groups)
}

// cpuUS is the function CPU per reaction in µs.
func (l levelResult) cpuUS() float64 {
	return float64(l.r.cost.cpuPerReaction.Nanoseconds()) / 1000
}

// fit is the least-squares fit of y = a + b·x.
func fit(x, y []float64) (a, b float64) {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return sy / n, 0
	}
	b = (n*sxy - sx*sy) / d
	a = (sy - b*sx) / n
	return a, b
}

// fitGroups fits CPU = a + b/G over the runs.
func fitGroups(rs []levelResult) (a, b float64) {
	var x, y []float64
	for _, r := range rs {
		if g := r.groupSize(); g > 0 {
			x = append(x, 1/g)
			y = append(y, r.cpuUS())
		}
	}
	return fit(x, y)
}

func parseLevels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-levels: %q is no count of clients", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// groupsCounted is the reactions writer's transactions so far
// (telemetry.MetricReactionGroups).
func groupsCounted() int64 {
	return otelcount.Global().Collect(nil).Total(telemetry.MetricReactionGroups)
}

// runLevels runs the hot item at each level, with each writer, the
// writers taking turns at each level so that the machine's load weighs on
// both alike.
func runLevels(ctx context.Context, es *emulators.Stack, lo levelsOptions, o options, stamp *benchreport.Stamp) error {
	levels, err := parseLevels(lo.levels)
	if err != nil {
		return err
	}
	writers := []writerKind{writerDeployed}
	if lo.baseline {
		writers = []writerKind{writerBaseline, writerDeployed}
	}
	var all [][]levelResult // by writer
	all = make([][]levelResult, len(writers))
	for li, clients := range levels {
		for wi, wk := range writers {
			lo := o
			lo.concurrency = clients
			lo.reactions = clients * max(lo.reactions/64, 1)
			fmt.Fprintf(os.Stderr, "bench: levels: %s writer, %d clients, %d reactions…\n", wk, clients, lo.reactions)
			c := configuration{name: fmt.Sprintf("%s-%d", wk, clients), writer: wk}
			g0 := groupsCounted()
			r, err := runHotItem(ctx, es, c, 100+li*len(writers)+wi, lo)
			if err != nil {
				return fmt.Errorf("levels: %s: %w", c.name, err)
			}
			all[wi] = append(all[wi], levelResult{writer: string(wk), clients: clients, reactions: lo.reactions, groups: groupsCounted() - g0, r: r})
		}
	}
	stamp.Finish()
	// The stamp, for the report in docs/benchmarks/reactions-cpu.md.
	fmt.Print("\n" + stamp.Header("A reaction's CPU by group size"))
	printLevels(os.Stdout, all)
	for wi, wk := range writers {
		if wk == writerDeployed {
			recordLevels(all[wi])
		}
	}
	return nil
}

// printLevels prints each writer's levels side by side, and its fit.
func printLevels(w io.Writer, all [][]levelResult) {
	for _, rs := range all {
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(w, "writer: %s\n", rs[0].writer)
		row := func(name string, f func(l levelResult) string) {
			fmt.Fprintf(w, "%-42s", name)
			for _, l := range rs {
				fmt.Fprintf(w, " %10s", f(l))
			}
			fmt.Fprintln(w)
		}
		row("clients", func(l levelResult) string { return strconv.Itoa(l.clients) })
		row("reactions", func(l levelResult) string { return strconv.Itoa(l.reactions) })
		row("mean group size G", func(l levelResult) string { return fmt.Sprintf("%.1f", l.groupSize()) })
		row("CPU per reaction (µs)", func(l levelResult) string { return fmt.Sprintf("%.0f", l.cpuUS()) })
		row("reactions/s accepted", func(l levelResult) string { return fmt.Sprintf("%.0f", l.r.accepted) })
		row("Pub/Sub messages per 1,000", func(l levelResult) string { return fmt.Sprintf("%.1f", l.r.cost.messages) })
		row("Spanner commits per 1,000", func(l levelResult) string { return fmt.Sprintf("%.1f", l.r.cost.commits) })
		row("Spanner reads per 1,000", func(l levelResult) string { return fmt.Sprintf("%.1f", l.r.cost.reads) })
		row("heap allocations per reaction", func(l levelResult) string { return fmt.Sprintf("%.0f", l.r.cost.allocs) })
		a, b := fitGroups(rs)
		fmt.Fprintf(w, "fit CPU = a + b/G: a = %.1f µs, b = %.0f µs (a group's own CPU); at G = 256: %.1f µs; at G = 31: %.1f µs\n\n",
			a, b, a+b/256, a+b/31)
	}
}

// recordLevels notes the deployed writer's fit for -costs.
func recordLevels(rs []levelResult) {
	a, b := fitGroups(rs)
	if math.IsNaN(a) || math.IsNaN(b) {
		return
	}
	record("reaction.cpu_fixed_us", a, "µs", "fit CPU = a + b/G of the hot-item runs by clients (-levels): a, the CPU of one reaction whatever its group")
	record("reaction.cpu_per_group_us", b, "µs", "fit CPU = a + b/G of the hot-item runs by clients (-levels): b, the CPU of one group-commit transaction, its message and its counting")
}

// runHotItem is runMode's hot-item part alone: a world of its own, the
// run, and its costs.
func runHotItem(ctx context.Context, es *emulators.Stack, c configuration, n int, o options) (result, error) {
	return runModeWith(ctx, es, c, n, o, false)
}
