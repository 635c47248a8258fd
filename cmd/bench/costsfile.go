package main

import (
	"sync"

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

// writeCosts merges this run's figures into path (benchreport.WriteCosts).
func writeCosts(path string, stamp *benchreport.Stamp) error {
	measured.Lock()
	defer measured.Unlock()
	return benchreport.WriteCosts(path, "bench", stamp, measured.figures)
}
