package capacity

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// CostsFile is where the benchmarks write the per-operation costs
// (go run ./cmd/bench -costs ...), from the repository root.
const CostsFile = "docs/benchmarks/costs.json"

// Costs are measured per-operation figures by name, and the runs that
// measured them: the file the benchmarks write (cmd/bench -costs) and the
// model reads.
type Costs struct {
	Comment string            `json:"comment"`
	Runs    map[string]Run    `json:"runs"`
	Figures map[string]Figure `json:"figures"`
}

// Run is one measuring run.
type Run struct {
	Command string `json:"command"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Uptime  string `json:"uptime"`
	// UptimeAfter is uptime at the end of the run (runs stamped before it
	// was recorded have none).
	UptimeAfter string `json:"uptimeAfter,omitempty"`
	Note        string `json:"note,omitempty"`
}

// Figure is one measured figure.
type Figure struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Run   string  `json:"run"`
	What  string  `json:"what"`
}

// LoadCosts reads the costs file of the repository at root.
func LoadCosts(root string) (*Costs, error) {
	b, err := os.ReadFile(filepath.Join(root, CostsFile))
	if err != nil {
		return nil, err
	}
	var c Costs
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", CostsFile, err)
	}
	for n, f := range c.Figures {
		if _, ok := c.Runs[f.Run]; !ok {
			return nil, fmt.Errorf("%s: figure %s names run %q, which the file does not describe", CostsFile, n, f.Run)
		}
	}
	return &c, nil
}

// figures reads named figures, each positive; a missing one is an error
// that names it, so that the model never runs on a figure nobody measured.
type figures struct {
	c    *Costs
	used map[string]bool
	errs []error
}

func (f *figures) get(name string) float64 {
	if f.used == nil {
		f.used = map[string]bool{}
	}
	fig, ok := f.c.Figures[name]
	switch {
	case !ok:
		f.errs = append(f.errs, fmt.Errorf("%s has no figure %s (run the benchmark that measures it with -costs)", CostsFile, name))
		return 0
	case fig.Value <= 0:
		f.errs = append(f.errs, fmt.Errorf("%s: figure %s is %v, not a positive measurement", CostsFile, name, fig.Value))
		return 0
	}
	f.used[name] = true
	return fig.Value
}

// Used are the figures the model read, sorted.
func (f *figures) Used() []string {
	var ns []string
	for n := range f.used {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}
