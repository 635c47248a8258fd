// Package layout checks the module's import rules (README, "Layout"): its
// test reads the import graph with `go list` and fails on an edge the rules
// forbid.
package layout
