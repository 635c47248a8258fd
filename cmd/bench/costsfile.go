package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/internal/capacity"
)

// The per-operation costs a run measured, written to the machine-readable
// file the capacity model reads (-costs). Figures of the sections that did
// not run are kept as they were, each with the run that measured it.

var measured = struct {
	sync.Mutex
	figures map[string]capacity.Figure
}{figures: map[string]capacity.Figure{}}

// record notes a figure of this run.
func record(name string, value float64, unit, what string) {
	measured.Lock()
	defer measured.Unlock()
	measured.figures[name] = capacity.Figure{Value: value, Unit: unit, What: what}
}

// writeCosts merges this run's figures into path, under a run named by
// the time it started, stamped by stamp, and drops runs no figure names any
// longer.
func writeCosts(path string, stamp *benchreport.Stamp) error {
	measured.Lock()
	defer measured.Unlock()
	if len(measured.figures) == 0 {
		return nil
	}
	f := capacity.Costs{Runs: map[string]capacity.Run{}, Figures: map[string]capacity.Figure{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	f.Comment = "Per-operation costs measured by go run ./cmd/bench (-costs): the inputs of the capacity model (internal/capacity, make capacity). Each figure names the run that measured it; rerun the command of a run to refresh its figures."
	stamp.Finish()
	id := "bench-" + stamp.Started.Format("20060102T150405Z")
	f.Runs[id] = capacity.Run{
		Command:     stamp.Command,
		Commit:      stamp.Commit,
		Date:        stamp.Started.Format(time.RFC3339),
		Machine:     stamp.Machine,
		Uptime:      stamp.UptimeBefore,
		UptimeAfter: stamp.UptimeAfter,
		Note:        "local stack on the emulators; the machine may be shared with other work (see uptime)",
	}
	for name, fig := range measured.figures {
		fig.Run = id
		f.Figures[name] = fig
	}
	for r := range f.Runs {
		used := false
		for _, fig := range f.Figures {
			used = used || fig.Run == r
		}
		if !used {
			delete(f.Runs, r)
		}
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}
