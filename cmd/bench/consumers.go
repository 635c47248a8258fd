package main

// The consumers benchmark: the production push handlers of ApplyCounters,
// ApplyViews and ApplyHistory (host.Push over the real stores on the emulators) fed the same
// number of Pub/Sub pushes over HTTP with 1 and more pushes in flight, side
// by side: messages/s and the CPU this process spent per message. The pushes
// come from the load child (load.go), so this process's CPU is the
// handlers' alone. They are not delivered by the Pub/Sub emulator, which
// keeps at most 2 pushes in flight per subscription. Each run checks its
// counts exact afterwards.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/cmd/internal/benchstack"
	applycountersfn "github.com/videngage/engagement/functions/applycounters"
	applyhistoryfn "github.com/videngage/engagement/functions/applyhistory"
	applyviewsfn "github.com/videngage/engagement/functions/applyviews"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/claimstore"
	"github.com/videngage/engagement/shared/views/viewstore"
)

type consumersOptions struct {
	messages int    // pushes per function and level
	levels   string // pushes in flight, comma-separated
	events   int    // counter events per ApplyCounters message
	watches  int    // watches per ApplyViews batch
	items    int    // distinct items (videos) per run
	out      string // also write the report here (markdown)
}

// consumerRun is one function at one level.
type consumerRun struct {
	function string
	inFlight int
	elapsed  time.Duration
	cpu      time.Duration
	units    int // events or watches counted, checked exact
}

func (r consumerRun) perSecond(n int) float64 { return float64(n) / r.elapsed.Seconds() }

func runConsumersBench(ctx context.Context, es *emulators.Stack, o consumersOptions) error {
	stamp := benchreport.Start(fmt.Sprintf("go run ./cmd/withemulators -- go run ./cmd/bench -only consumers -consumer-messages %d -consumer-levels %s -consumer-events %d -consumer-watches %d -consumer-items %d -consumer-out docs/benchmarks/consumers.md",
		o.messages, o.levels, o.events, o.watches, o.items))
	var levels []int
	for _, s := range strings.Split(o.levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-consumer-levels %q: want positive numbers", o.levels)
		}
		levels = append(levels, n)
	}
	srv, err := benchstack.StartServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	cfg, teardown, err := benchstack.Provision(ctx, es, srv, "bench-consumers", nil)
	if err != nil {
		return err
	}
	defer teardown()
	c, err := host.New(ctx, cfg, host.NeedSpanner|host.NeedBigtable)
	if err != nil {
		return err
	}
	defer c.Close()
	store, err := applycountersfn.Build(c)
	if err != nil {
		return err
	}
	counts := countstore.New(spannerdb.Wrap(c.Spanner, c.Config))
	staging := viewstore.NewStaging(c.BigtableTx)
	mux := http.NewServeMux()
	mux.Handle("/push/ApplyCounters", applycountersfn.New(store, nil))
	mux.Handle("/push/ApplyViews", applyviewsfn.New(claimstore.NewClaims(c.BigtableTx, c.Config.History.ViewWindow), staging, history.NewViewerHasher(c.Config.History.ViewerHashKey), applyviewsfn.Eligibility{}, nil, nil))
	histories := historystore.New(c.Bigtable)
	mux.Handle("/push/ApplyHistory", applyhistoryfn.New(histories, nil))
	// The floor: a handler that reads the push and acknowledges it.
	mux.Handle("/push/floor", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Set(mux)

	type consumer struct {
		name   string
		bodies func(run string) ([]string, int, []string, error) // pushes, units, items
		check  func(ctx context.Context, items []string, want int) error
	}
	counterCheck := func(field func(counter.Values) int64) func(context.Context, []string, int) error {
		return func(ctx context.Context, items []string, want int) error {
			got, _, err := counts.Totals(ctx, items)
			if err != nil {
				return err
			}
			var n int64
			for _, id := range items {
				n += field(got[id])
			}
			if n != int64(want) {
				return fmt.Errorf("counted %d, want %d", n, want)
			}
			return nil
		}
	}
	consumers := []consumer{
		{"ApplyCounters", func(run string) ([]string, int, []string, error) {
			return counterPushes(run, o)
		}, counterCheck(func(v counter.Values) int64 { return v.Comments })},
		{"ApplyViews", func(run string) ([]string, int, []string, error) {
			return viewPushes(run, o)
		}, func(ctx context.Context, items []string, want int) error {
			// The rollup's fold, outside the measured window.
			for {
				st, err := views.Fold(ctx, staging, store, views.FoldOptions{Hi: counter.Parts})
				if err != nil {
					return err
				}
				if st.Batches == 0 {
					break
				}
			}
			return counterCheck(func(v counter.Values) int64 { return v.Views })(ctx, items, want)
		}},
		{"ApplyHistory", func(run string) ([]string, int, []string, error) {
			bodies, units, _, err := viewPushes(run, o)
			return bodies, units, viewers(run, units), err
		}, func(ctx context.Context, users []string, want int) error {
			// Every viewer's history holds its one watch.
			var found atomic.Int64
			g, ctx := errgroup.WithContext(ctx)
			g.SetLimit(16)
			for _, u := range users {
				g.Go(func() error {
					page, err := histories.List(ctx, u, nil, time.Time{}, 2)
					found.Add(int64(len(page.Entries)))
					return err
				})
			}
			if err := g.Wait(); err != nil {
				return err
			}
			if n := found.Load(); n != int64(want) {
				return fmt.Errorf("histories hold %d watches, want %d", n, want)
			}
			return nil
		}},
		{"floor", func(run string) ([]string, int, []string, error) {
			b, n, _, err := counterPushes(run, o)
			return b, n, nil, err
		}, nil},
	}

	var runs []consumerRun
	for i, cs := range consumers {
		// Warm up: connections, sessions, the first transactions.
		warm, _, _, err := cs.bodies(fmt.Sprintf("w%d", i))
		if err != nil {
			return err
		}
		if _, _, err := pushAll(srv.URL+"/push/"+cs.name, warm[:min(len(warm), 50)], 4); err != nil {
			return fmt.Errorf("%s warm-up: %w", cs.name, err)
		}
		for j, level := range levels {
			fmt.Fprintf(os.Stderr, "bench: consumers: %s, %d in flight…\n", cs.name, level)
			bodies, units, items, err := cs.bodies(fmt.Sprintf("r%d%d", i, j))
			if err != nil {
				return err
			}
			elapsed, cpu, err := pushAll(srv.URL+"/push/"+cs.name, bodies, level)
			if err != nil {
				return fmt.Errorf("%s at %d in flight: %w", cs.name, level, err)
			}
			if cs.check != nil {
				if err := cs.check(ctx, items, units); err != nil {
					return fmt.Errorf("%s at %d in flight: %w", cs.name, level, err)
				}
			}
			runs = append(runs, consumerRun{function: cs.name, inFlight: level, elapsed: elapsed, cpu: cpu, units: units})
		}
	}
	recordConsumers(o, runs)
	const title = "Consumers at 1 and more pushes in flight"
	body := consumersReport(o, runs)
	fmt.Print(stamp.Report(title, body))
	if o.out != "" {
		return stamp.Write(o.out, title, body)
	}
	return nil
}

// pushAll posts every body to url from the load child with inFlight
// requests at a time, each answered 204, and returns the wall time and this
// process's CPU time.
func pushAll(url string, bodies []string, inFlight int) (elapsed, cpu time.Duration, err error) {
	child, err := startLoadChild(loadJob{URL: url, Pushes: bodies, Concurrency: inFlight})
	if err != nil {
		return 0, 0, err
	}
	runtime.GC()
	cpu0 := processCPU()
	res, err := child.run()
	cpu = processCPU() - cpu0
	if err != nil {
		return 0, 0, err
	}
	if res.Failures > 0 {
		return 0, 0, fmt.Errorf("%d pushes not acknowledged, first: %s", res.Failures, res.FirstErr)
	}
	return res.Elapsed, cpu, nil
}

// counterPushes are o.messages counter messages of o.events comment counts
// each, spread over o.items items: what a group commit of the Comments
// function publishes.
func counterPushes(run string, o consumersOptions) (bodies []string, units int, items []string, err error) {
	for k := range o.items {
		items = append(items, fmt.Sprintf("bc-%s-%03d", run, k))
	}
	attrs := map[string]string{events.AttrKind: events.KindValue, events.AttrSchema: events.SchemaValue}
	at := time.Now().UTC()
	for i := range o.messages {
		evs := make([]events.Event, o.events)
		for j := range evs {
			evs[j] = events.Event{
				ID: fmt.Sprintf("bench-%s-%d-%d", run, i, j), Kind: events.KindCounterDelta, Time: at,
				Deltas: []counter.Delta{{Key: items[(i*o.events+j)%len(items)], Field: counter.Comments, N: 1}},
			}
		}
		data, err := events.Encode(events.Message{Events: evs})
		if err != nil {
			return nil, 0, nil, err
		}
		bodies = append(bodies, string(bus.PushBody(bus.Message{ID: fmt.Sprintf("%s-%d", run, i), Data: data, Attributes: attrs}, "counter-apply")))
	}
	return bodies, o.messages * o.events, items, nil
}

// viewPushes are o.messages batches of o.watches watches each, every watch
// by another user, over o.items videos, dated a minute before they are
// built (each a view of its viewing window): what the History function
// publishes.
func viewPushes(run string, o consumersOptions) (bodies []string, units int, items []string, err error) {
	for k := range o.items {
		items = append(items, fmt.Sprintf("bv-%s-%03d", run, k))
	}
	at := time.Now().UTC().Add(-time.Minute)
	for i := range o.messages {
		ws := make([]history.Watch, o.watches)
		for j := range ws {
			n := i*o.watches + j
			ws[j] = history.NewWatch(viewer(run, n), items[n%len(items)], at.Add(time.Duration(n%50_000)*time.Millisecond), 1)
		}
		b := history.NewBatch(ws)
		data, err := b.Encode()
		if err != nil {
			return nil, 0, nil, err
		}
		attrs := map[string]string{"kind": "watches", "batchId": b.ID}
		bodies = append(bodies, string(bus.PushBody(bus.Message{ID: fmt.Sprintf("%s-%d", run, i), Data: data, Attributes: attrs}, "history-views")))
	}
	return bodies, o.messages * o.watches, items, nil
}

// deployedPushes is the pushes an event function's instance takes at once
// (function_defaults.event.concurrency in both environments): the level
// whose CPU per message sizes the deployed consumers (-costs).
const deployedPushes = 16

// recordConsumers notes each consumer's CPU per message at the deployed
// level for -costs.
func recordConsumers(o consumersOptions, runs []consumerRun) {
	per := map[string]int{"ApplyCounters": o.events, "ApplyViews": o.watches, "ApplyHistory": o.watches}
	for _, r := range runs {
		n, ok := per[r.function]
		if !ok || r.inFlight != deployedPushes {
			continue
		}
		record(strings.ToLower(r.function)+".cpu_us_per_message", float64(r.cpu.Microseconds())/float64(o.messages), "µs",
			fmt.Sprintf("CPU %s's push handler spent per message of %d, %d pushes in flight", r.function, n, r.inFlight))
	}
}

// viewer is the user of viewPushes' nth watch of a run.
func viewer(run string, n int) string { return fmt.Sprintf("u-%s-%d", run, n) }

// viewers are the users of a run's n watches.
func viewers(run string, n int) []string {
	users := make([]string, n)
	for i := range users {
		users[i] = viewer(run, i)
	}
	return users
}

// consumersReport is the markdown report's body: what ran, then a row per
// function and level.
func consumersReport(o consumersOptions, runs []consumerRun) string {
	var b strings.Builder
	b.WriteString("The production push handlers (`host.Push`) of ApplyCounters, ApplyViews (folded views) and ApplyHistory over the emulators, " +
		"one process, fed over loopback HTTP by a separate load process; `floor` is a handler that reads the push and answers 204. " +
		"The Pub/Sub emulator keeps at most 2 pushes in flight per subscription, so it does not deliver these pushes. " +
		"CPU is this process's (user + system), not the emulators'; each run's counts are checked exact afterwards. " +
		"The machine may be shared with other work (see uptime): read the ratios first. The CPU per message at 16 in flight (the deployed concurrency) goes to docs/benchmarks/costs.json with -costs.\n\n")
	b.WriteString("| function | in flight | messages | messages/s | events or watches/s | CPU per message | vCPU busy |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		msgs := o.messages
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.0f | %d µs | %.2f |\n", r.function, r.inFlight, msgs, r.perSecond(msgs), r.perSecond(r.units),
			(r.cpu / time.Duration(msgs)).Microseconds(), r.cpu.Seconds()/r.elapsed.Seconds())
	}
	return b.String()
}
