package benchreport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/videngage/engagement/internal/capacity"
)

// WriteCosts merges figures, measured by the run stamp describes, into the
// costs file at path (capacity.CostsFile, which the capacity model reads),
// under a run named by the benchmark and the time it started; figures of
// other runs are kept as they were, and runs no figure names any longer
// are dropped.
func WriteCosts(path, benchmark string, stamp *Stamp, figures map[string]capacity.Figure) error {
	if len(figures) == 0 {
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
	f.Comment = "Per-operation costs measured by the benchmarks (go run ./cmd/bench -costs, go run ./cmd/benchmanip -costs): the inputs of the capacity model (internal/capacity, make capacity). Each figure names the run that measured it; rerun the command of a run to refresh its figures."
	stamp.Finish()
	id := benchmark + "-" + stamp.Started.Format("20060102T150405Z")
	f.Runs[id] = capacity.Run{
		Command:     stamp.Command,
		Commit:      stamp.Commit,
		Date:        stamp.Started.Format(time.RFC3339),
		Machine:     stamp.Machine,
		Uptime:      stamp.UptimeBefore,
		UptimeAfter: stamp.UptimeAfter,
		Note:        "local stack on the emulators; the machine may be shared with other work (see uptime)",
	}
	for name, fig := range figures {
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
