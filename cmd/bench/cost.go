package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/videngage/engagement/shared/spannerdb"
)

// configuration is one column of the table: a name and the environment the
// functions run with.
type configuration struct {
	name string
	env  map[string]string
}

// configurations are compared side by side. "sharded-before" is the sharded
// engine as it was before the reaction hot path was trimmed: each outbox row
// deleted on its own, the reaction rate limit read and written in Spanner,
// every token verified with RSA. Per-user rate limits are on in every
// column (the production setting; each user reacts once, far under it).
var configurations = []configuration{
	{"naive", map[string]string{
		"COUNTER_MODE": "naive", "COUNTER_OUTBOX_DELETE": "row", "REACTION_RATE_LIMIT_STORE": "spanner", "AUTH_TOKEN_CACHE": "0",
	}},
	{"sharded-before", map[string]string{
		"COUNTER_MODE": "sharded", "COUNTER_OUTBOX_DELETE": "row", "REACTION_RATE_LIMIT_STORE": "spanner", "AUTH_TOKEN_CACHE": "0",
	}},
	{"sharded", map[string]string{"COUNTER_MODE": "sharded"}},
}

// cost is the work of one hot-item run per 1,000 reactions.
type cost struct {
	commits, rowWrites, reads, messages, messageKB, cpuMS float64
	cpuPerReaction                                        time.Duration
}

func newCost(d spannerdb.Stats, messages, bytes int64, cpu time.Duration, n int) cost {
	per := func(x int64) float64 { return float64(x) * 1000 / float64(n) }
	return cost{
		commits: per(d.CommitRPCs), rowWrites: per(d.RowWrites), reads: per(d.ReadRPCs), messages: per(messages),
		messageKB: per(bytes) / 1024,
		cpuMS:     float64(cpu.Microseconds()) / float64(n), cpuPerReaction: cpu / time.Duration(n),
	}
}

// startProfile writes a CPU profile of the run to path + "." + name, when
// path is set.
func startProfile(path, name string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path + "." + name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// costRows prints the cost figures of each result, per 1,000 reactions.
func costRows(row func(string, func(r result) string)) {
	row("5. per 1,000 hot-item reactions: Spanner commits", func(r result) string { return fmt.Sprintf("%.0f", r.cost.commits) })
	row("   Spanner row writes (mutations)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.rowWrites) })
	row("   Spanner reads (read and query calls)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.reads) })
	row("   Pub/Sub messages", func(r result) string { return fmt.Sprintf("%.0f", r.cost.messages) })
	row("   Pub/Sub message data (KiB, published once)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.messageKB) })
	row("   function CPU-ms (getrusage, load in a child)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.cpuMS) })
	row("   function CPU per reaction", func(r result) string {
		return fmt.Sprintf("%d µs", r.cost.cpuPerReaction.Microseconds())
	})
}
