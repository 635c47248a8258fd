package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/videngage/engagement/cmd/internal/benchstack"
	"github.com/videngage/engagement/internal/otelcount"
)

// configuration is one column of the table: a name and the environment the
// functions run with.
type configuration struct {
	name string
	env  map[string]string
	// writer is the reactions' writer served (zero: the deployed one).
	writer writerKind
}

// configurations are compared side by side: the deployed engine. Per-user
// rate limits are on (the production setting; each user reacts once, far
// under it). The engines it replaced are retired
// (docs/decisions/retired-baselines.md).
var configurations = []configuration{
	{name: "sharded"},
}

// cost is the work of one hot-item run per 1,000 reactions.
type cost struct {
	commits, rowWrites, reads, messages, messageKB, cpuMS float64
	cpuPerReaction                                        time.Duration
	// writesByTable are the row writes per table, per 1,000 reactions.
	writesByTable map[string]float64
	// Heap allocations and bytes per reaction, and GC cycles per 1,000
	// reactions: what the CPU figure is made of, counted exactly whatever
	// the machine's load.
	allocs, allocBytes, gcs float64
}

// newCost is the work of a run of n reactions: d the Spanner work counted,
// byTable0 and byTable1 spannerdb.WritesByTable before and after.
func newCost(d otelcount.Spanner, byTable0, byTable1 map[string]int64, mem0, mem1 *runtime.MemStats, messages, bytes int64, cpu time.Duration, n int) cost {
	per := func(x int64) float64 { return float64(x) * 1000 / float64(n) }
	c := cost{
		commits: per(d.Commits), rowWrites: per(d.RowWrites), reads: per(d.Reads), messages: per(messages),
		messageKB: per(bytes) / 1024,
		cpuMS:     float64(cpu.Microseconds()) / float64(n), cpuPerReaction: cpu / time.Duration(n),
		writesByTable: map[string]float64{},
		allocs:        float64(mem1.Mallocs-mem0.Mallocs) / float64(n),
		allocBytes:    float64(mem1.TotalAlloc-mem0.TotalAlloc) / float64(n),
		gcs:           per(int64(mem1.NumGC - mem0.NumGC)),
	}
	for t, w := range byTable1 {
		if w > byTable0[t] {
			c.writesByTable[t] = per(w - byTable0[t])
		}
	}
	return c
}

// startProfile writes a CPU profile of the run to cpuPath + "." + name,
// and a profile of the heap allocations made during the run to memPath +
// "." + name, when they are set.
func startProfile(cpuPath, memPath, name string) (stop func() error, err error) {
	stops := []func() error{}
	stop = func() error {
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}
	if memPath != "" {
		// Sample every 4 KiB allocated (512 KiB by default), and count from
		// here: the profile's alloc figures are then the run's.
		runtime.MemProfileRate = 4096
		base := pprof.Lookup("allocs")
		runtime.GC()
		f, err := os.Create(memPath + "." + name + ".base")
		if err != nil {
			return nil, err
		}
		err = base.WriteTo(f, 0)
		f.Close()
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() error {
			runtime.GC()
			f, err := os.Create(memPath + "." + name)
			if err != nil {
				return err
			}
			defer f.Close()
			return pprof.Lookup("allocs").WriteTo(f, 0)
		})
	}
	if cpuPath != "" {
		f, err := os.Create(cpuPath + "." + name)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stops = append(stops, func() error { pprof.StopCPUProfile(); return f.Close() })
	}
	return stop, nil
}

// costRows prints the cost figures of each result, per 1,000 reactions.
func costRows(rs []result, row func(string, func(r result) string)) {
	row("5. per 1,000 hot-item reactions: Spanner commits", func(r result) string { return fmt.Sprintf("%.0f", r.cost.commits) })
	row("   Spanner row writes (mutations)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.rowWrites) })
	for _, t := range tablesWritten(rs) {
		row("     of which "+t, func(r result) string { return fmt.Sprintf("%.1f", r.cost.writesByTable[t]) })
	}
	row("   Spanner reads (read and query calls)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.reads) })
	row("   Pub/Sub messages", func(r result) string { return fmt.Sprintf("%.0f", r.cost.messages) })
	row("   Pub/Sub message data (KiB, published once)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.messageKB) })
	row("   function CPU-ms (getrusage, load in a child)", func(r result) string { return fmt.Sprintf("%.0f", r.cost.cpuMS) })
	row("   function CPU per reaction", func(r result) string {
		return fmt.Sprintf("%d µs", r.cost.cpuPerReaction.Microseconds())
	})
	row("   heap allocations per reaction (count / bytes)", func(r result) string {
		return fmt.Sprintf("%.0f / %.1f KiB", r.cost.allocs, r.cost.allocBytes/1024)
	})
	row("   GC cycles", func(r result) string { return fmt.Sprintf("%.1f", r.cost.gcs) })
}

// tablesWritten are the tables any result wrote, sorted.
func tablesWritten(rs []result) []string {
	var ts []string
	for _, r := range rs {
		for t := range r.cost.writesByTable {
			if !slices.Contains(ts, t) {
				ts = append(ts, t)
			}
		}
	}
	slices.Sort(ts)
	return ts
}

// httpFloor is the CPU this process spends per request of the hot-item
// load (the same child, clients, body and Authorization header) on a
// handler that reads the body and answers a reaction's 200 at once: the
// part of a reaction's CPU that serving one HTTP request costs whatever the
// handler does.
func httpFloor(n, concurrency int) (time.Duration, error) {
	srv, err := benchstack.StartServer()
	if err != nil {
		return 0, err
	}
	defer srv.Close()
	answer := []byte(`{"contentId":"hot","reaction":"like","version":1,"updateTime":"2026-01-01T00:00:00.000000Z"}` + "\n")
	srv.Set(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", `"1"`)
		w.WriteHeader(http.StatusOK)
		w.Write(answer)
	}))
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("token-of-user-%d", i)
	}
	child, err := startLoadChild(hotLoad(srv.URL, tokens, concurrency))
	if err != nil {
		return 0, err
	}
	cpu0 := processCPU()
	load, err := child.run()
	if err != nil {
		return 0, err
	}
	if load.Failures > 0 {
		return 0, fmt.Errorf("http floor: %d requests failed, first: %v", load.Failures, load.FirstErr)
	}
	return (processCPU() - cpu0) / time.Duration(n), nil
}
