package counter

import "fmt"

// Parts is how many hash partitions the rollup's work spreads over: the
// moved counters (MovedCounters.Part, shared/topology/ddl/045_jobs.sql) and
// the staged views (viewstore.RowKey). A rollup partition is a range of
// them, the same for both, so one instance folds a counter's deltas and
// the views staged for it.
const Parts = 4096

// PartRange is the [lo, hi) range of Parts of partition i of n.
func PartRange(i, n int) (lo, hi int, err error) {
	if n <= 0 || n > Parts || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("partition %d of %d: want 0 ≤ partition < partitions ≤ %d", i, n, Parts)
	}
	return i * Parts / n, (i + 1) * Parts / n, nil
}
