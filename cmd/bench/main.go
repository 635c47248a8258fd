// Command bench measures the counter engine on the local stack (the Google
// Cloud emulators), the functions as deployed (sharded, batched):
//
//  1. hot item: reactions/s accepted, and applied end to end
//     (HTTP → Pub/Sub → Spanner), with the final count checked exact;
//  2. Spanner read-write commits and Pub/Sub messages per 1,000 reactions;
//  3. GET /v1/counts with 50 ids: p50/p99 latency, Spanner reads per request;
//  4. freshness: time from an accepted write to its visibility in
//     anonymous counts, p50/p99;
//  5. counts reads (counts.go): GET /v1/counts and /v1/me/counts, the
//     instance cache off and on.
//
// Then the views benchmark (views.go): watches of one hot video counted end
// to end with each watch its own message and transaction, and batched; and
// the precision of uniqueViewers. Then the comments benchmark (comments.go):
// comments on one hot video accepted and counted, a spam sweep, the final
// count checked exact. Then the consumers benchmark (consumers.go):
// ApplyCounters' and ApplyViews' push handlers at 1 and more pushes in
// flight.
//
// Usage: go run ./cmd/bench [-only <configurations>,views,comments,consumers] [-reactions 1000] [-concurrency 64] [-watches 20000] [-watchers 64] [-more-watchers 256] [-views-baseline=false] [-comments 12000] [-spam 10000] [-sweep 1000] [-comments-out docs/benchmarks/comments.md] [-consumer-messages 400] [-consumer-levels 1,4,16,64] [-consumer-out docs/benchmarks/consumers.md]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/cmd/internal/benchstack"
	"github.com/videngage/engagement/cmd/internal/localstack"
	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/spannerdb"
)

type options struct {
	reactions   int
	concurrency int
	countsReqs  int
	freshness   int
	timeout     time.Duration
	cpuProfile  string
	memProfile  string
	only        string
	costs       string
}

func main() {
	if os.Getenv(loadChildEnv) != "" {
		runLoadChild()
	}
	benchstack.Main("bench", realMain)
}

func realMain(ctx context.Context) error {
	stamp := benchreport.Start("")
	var o options
	flag.IntVar(&o.reactions, "reactions", 1000, "hot-item reactions per configuration (one per user)")
	flag.IntVar(&o.concurrency, "concurrency", 64, "concurrent clients")
	flag.IntVar(&o.countsReqs, "counts", 400, "GET /v1/counts requests (50 ids each)")
	flag.IntVar(&o.freshness, "freshness", 40, "freshness samples")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up applying after this long")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each configuration's hot-item run (and of each counts setting's first signed-in round) to this file, suffixed with the configuration")
	flag.StringVar(&o.memProfile, "memprofile", "", "write a profile of the heap allocations of each configuration's hot-item run to this file, suffixed with the configuration (and the allocations before the run to <file>.<configuration>.base: go tool pprof -sample_index=alloc_objects -diff_base ...)")
	flag.StringVar(&o.costs, "costs", "", "merge the measured per-operation costs into this JSON file (docs/benchmarks/costs.json, read by make capacity)")
	flag.StringVar(&o.only, "only", "", `run only these configurations (comma-separated names; "views" is the views benchmark, "comments" the comments benchmark, "countrows" the rows and bytes of one counts read)`)
	var vo viewsOptions
	flag.IntVar(&vo.watches, "watches", 20000, "views benchmark: distinct watches of the hot video per mode")
	flag.IntVar(&vo.watchers, "watchers", 64, "views benchmark: concurrent clients")
	flag.IntVar(&vo.moreWatchers, "more-watchers", 256, "views benchmark: concurrent clients of the second pair of batched runs (0: none)")
	flag.BoolVar(&vo.baseline, "views-baseline", true, "views benchmark: run the per-watch path (no group commit) first")
	flag.IntVar(&vo.retryOne, "retry-one", 10, "views benchmark: one watch in this many is sent twice (a client's retry)")
	flag.IntVar(&vo.store, "store-viewers", 100000, "distinct viewers through the counter store")
	flag.IntVar(&vo.sketch, "sketch-viewers", 1000000, "distinct viewers through the sketch alone")
	flag.DurationVar(&vo.timeout, "views-timeout", 15*time.Minute, "views benchmark: give up counting after this long")
	var co commentsOptions
	flag.IntVar(&co.comments, "comments", 12000, "comments benchmark: comments posted on the hot video")
	flag.IntVar(&co.spam, "spam", 10000, "comments benchmark: of which marked as spam afterwards")
	flag.IntVar(&co.sweep, "sweep", 1000, "comments benchmark: comment ids per spam call (at most 1,000)")
	flag.DurationVar(&co.timeout, "comments-timeout", 5*time.Minute, "comments benchmark: give up waiting for the counts after this long")
	flag.StringVar(&co.out, "comments-out", "", "comments benchmark: also write the report to this file (docs/benchmarks/comments.md)")
	var cso consumersOptions
	flag.IntVar(&cso.messages, "consumer-messages", 400, "consumers benchmark: pushes per function and level")
	flag.StringVar(&cso.levels, "consumer-levels", "1,4,16,64", "consumers benchmark: pushes in flight, comma-separated")
	flag.IntVar(&cso.events, "consumer-events", 20, "consumers benchmark: counter events per ApplyCounters message")
	flag.IntVar(&cso.watches, "consumer-watches", 20, "consumers benchmark: watches per ApplyViews batch")
	flag.IntVar(&cso.items, "consumer-items", 50, "consumers benchmark: distinct items per run")
	flag.StringVar(&cso.out, "consumer-out", "", "consumers benchmark: also write the report to this file (docs/benchmarks/consumers.md)")
	var lo levelsOptions
	flag.StringVar(&lo.levels, "levels", "", "reactions by load: the hot-item run at each of these counts of closed-loop clients (comma-separated, e.g. 64,128,256,512), -reactions/64 reactions per client, with the mean group size G and the fit CPU = a + b/G")
	flag.BoolVar(&lo.baseline, "levels-baseline", true, "reactions by load: run the baseline writer (no wait for company, 200 a transaction, the publisher's bundling) at each level too")
	flag.Parse()
	co.concurrency = o.concurrency
	if err := co.check(); err != nil {
		return err
	}
	section := func(name string) bool { return o.only == "" || slices.Contains(strings.Split(o.only, ","), name) }
	if o.costs != "" {
		defer func() {
			if err := writeCosts(o.costs, stamp); err != nil {
				fmt.Fprintf(os.Stderr, "bench: writing %s: %v\n", o.costs, err)
			}
		}()
	}

	st, err := localstack.Emulators(ctx, "bench", emulators.Options{})
	if err != nil {
		return err
	}
	defer st.Stop()
	if *countsOnly {
		return countsReadBench(ctx, st, o.cpuProfile)
	}
	if lo.levels != "" {
		return runLevels(ctx, st, lo, o, stamp)
	}
	var results []result
	for i, c := range configurations {
		if o.only != "" && !slices.Contains(strings.Split(o.only, ","), c.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s…\n", c.name)
		r, err := runMode(ctx, st, c, i, o)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		results = append(results, r)
	}
	if len(results) > 0 {
		printTable(os.Stdout, o, results)
		floor, err := httpFloor(o.reactions, o.concurrency)
		if err != nil {
			return err
		}
		fmt.Printf("\nHTTP floor, the same load on a handler answering at once: %d µs of CPU a request\n", floor.Microseconds())
		for _, r := range results {
			if r.mode == "sharded" {
				recordReaction(r, o, floor)
			}
		}
	}
	if o.only == "" {
		if err := countsReadBench(ctx, st, o.cpuProfile); err != nil {
			return err
		}
	}
	if section("views") {
		if err := runViewsBench(ctx, st, vo); err != nil {
			return err
		}
	}
	if section("comments") {
		if err := runCommentsBench(ctx, st, co); err != nil {
			return err
		}
	}
	if section("countrows") {
		if err := runCountRowsBench(ctx, *countRowsOut); err != nil {
			return err
		}
	}
	if section("consumers") {
		return runConsumersBench(ctx, st, cso)
	}
	return nil
}

type result struct {
	mode               string
	cost               cost
	accepted, applied  float64 // reactions/s
	exact              bool
	final              int64
	commitsPer1000     float64
	messagesPer1000    float64
	eventsPerMessage   float64
	countsP50, P99     time.Duration
	readsPerRequest    float64
	freshP50, freshP99 time.Duration
	shards             int
	// pushTime is the time ApplyCounters held a push, on average.
	pushTime time.Duration
}

func runMode(ctx context.Context, es *emulators.Stack, c configuration, n int, o options) (result, error) {
	return runModeWith(ctx, es, c, n, o, true)
}

// runModeWith is runMode, with the counts latency and freshness runs only
// when all is set.
func runModeWith(ctx context.Context, es *emulators.Stack, c configuration, n int, o options, all bool) (result, error) {
	srv, err := benchstack.StartServer()
	if err != nil {
		return result{}, err
	}
	defer srv.Close()
	// The engines compared, not the instance cache of counts (counts.go
	// measures that): every counts read and freshness poll reads Spanner.
	env := map[string]string{"COUNTS_CACHE_TTL": "0s"}
	maps.Copy(env, c.env)
	cfg, teardown, err := benchstack.Provision(ctx, es, srv, fmt.Sprintf("bench-%d-%d", os.Getpid(), n), env)
	if err != nil {
		return result{}, err
	}
	defer teardown()
	wk := c.writer
	if wk == "" {
		wk = writerDeployed
	}
	s, err := newStackWith(ctx, cfg, srv, wk)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	r := result{mode: c.name}
	if err := hotItem(ctx, s, srv, o, &r); err != nil {
		return r, err
	}
	if !all {
		return r, nil
	}
	if err := countsLatency(ctx, s, srv, o, &r); err != nil {
		return r, err
	}
	if err := freshness(ctx, s, srv, o, &r); err != nil {
		return r, err
	}
	return r, nil
}

// recordReaction notes the deployed engine's hot-item figures for -costs.
func recordReaction(r result, o options, floor time.Duration) {
	record("reaction.cpu_us", float64(r.cost.cpuPerReaction.Microseconds()), "µs",
		"function CPU per hot-item reaction: the serving process (Reactions, ApplyCounters, Rollup in one process), getrusage, load in a child process")
	record("reaction.http_floor_us", float64(floor.Microseconds()), "µs", "CPU per request of the same load on a handler answering at once")
	record("reaction.spanner_commits_per_1000", r.cost.commits, "commits", "Spanner read-write commits per 1,000 reactions (reaction transactions, consumer, folds)")
	record("reaction.spanner_row_writes_per_1000", r.cost.rowWrites, "rows", "Spanner row writes (mutations) per 1,000 reactions")
	record("reaction.spanner_reads_per_1000", r.cost.reads, "calls", "Spanner read and query calls per 1,000 reactions")
	record("reaction.messages_per_1000", r.cost.messages, "messages", "Pub/Sub messages published per 1,000 reactions")
	record("reaction.message_bytes_per_1000", r.cost.messageKB*1024, "bytes", "Pub/Sub message data published per 1,000 reactions")
	record("reaction.clients", float64(o.concurrency), "clients", "concurrent clients of the hot-item run")
	record("reaction.accepted_per_s", r.accepted, "reactions/s", "reactions answered 200 per second, one serving process")
	record("reaction.push_ms", float64(r.pushTime.Microseconds())/1000, "ms", "time ApplyCounters held a counter message of the run (one push at a time)")
	record("reaction.applied_per_s", r.applied, "reactions/s", "reactions counted end to end per second, one ApplyCounters taking one push at a time")
}

func newClient(conc int) *http.Client { return benchstack.NewClient(conc, 30*time.Second) }

// do sends a request (JSON when it has a body, hdr as name, value pairs)
// and returns the answer's status and body.
func do(c *http.Client, method, url, token, body string, hdr ...string) (int, []byte, error) {
	code, _, b, err := doHeader(c, method, url, token, body, hdr...)
	return code, b, err
}

// doHeader is do with the answer's headers.
func doHeader(c *http.Client, method, url, token, body string, hdr ...string) (int, http.Header, []byte, error) {
	return (&workload.Client{HTTP: c}).Send(method, url, token, body, hdr...)
}

// hotItem: o.reactions users like one item as fast as o.concurrency clients
// can; accepted = all answered 200, applied = the exact count reached.
func hotItem(ctx context.Context, s *stack, srv *benchstack.Server, o options, r *result) error {
	tokens := make([]string, o.reactions)
	for i := range tokens {
		t, err := s.token(fmt.Sprintf("user-%d", i), false)
		if err != nil {
			return err
		}
		tokens[i] = t
	}
	client := newClient(o.concurrency)
	// Warm up: connections, the key set, one counted reaction.
	warm, _ := s.token("warm", false)
	if code, b, err := do(client, "PUT", srv.URL+"/v1/reactions/warmup", warm, `{"reaction":"like"}`); err != nil || code != 200 {
		return fmt.Errorf("warm-up: %d %s %v", code, b, err)
	}
	// Each user first asks for their own reaction on the item, as a client
	// does when it shows the item: the instance has seen every token before
	// the measured run (what its token cache is for; without a cache, each
	// PUT verifies its token with RSA all the same).
	if err := forEach(o.concurrency, len(tokens), func(i int) error {
		code, b, err := do(client, "GET", srv.URL+"/v1/reactions?ids=hot", tokens[i], "")
		if err != nil || code != 200 {
			return fmt.Errorf("own reaction: %d %s %v", code, b, err)
		}
		return nil
	}); err != nil {
		return err
	}
	time.Sleep(time.Second)
	child, err := startLoadChild(hotLoad(srv.URL, tokens, o.concurrency))
	if err != nil {
		return err
	}
	stopProfile, err := startProfile(o.cpuProfile, o.memProfile, r.mode)
	if err != nil {
		return err
	}

	want := s.CountedLikes() + int64(o.reactions)
	before, tables0 := otelcount.Global().Spanner(), otelcount.Global().Spanner().WritesByTable
	topic := s.Config.PubSub.CounterTopic
	p0 := otelcount.Global().Published()
	m0, b0 := p0.Messages[topic], p0.Bytes[topic]
	var mem0, mem1 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	pn0, pb0 := srv.Pushes("ApplyCounters")
	cpu0 := processCPU()
	start := time.Now()
	load, err := child.run()
	if err != nil {
		return err
	}
	if load.Failures > 0 {
		return fmt.Errorf("%d reactions failed, first: %v", load.Failures, load.FirstErr)
	}
	// Applied: the consumer has counted every like (an in-process
	// counter, so that waiting costs no Spanner work and no CPU to speak of).
	deadline := time.Now().Add(o.timeout)
	for s.CountedLikes() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	appliedIn := time.Since(start)
	cpu := processCPU() - cpu0
	if pn1, pb1 := srv.Pushes("ApplyCounters"); pn1 > pn0 {
		r.pushTime = (pb1 - pb0) / time.Duration(pn1-pn0)
	}
	runtime.ReadMemStats(&mem1)
	after, tables1 := otelcount.Global().Spanner(), otelcount.Global().Spanner().WritesByTable
	p1 := otelcount.Global().Published()
	m1, b1 := p1.Messages[topic], p1.Bytes[topic]
	if err := stopProfile(); err != nil {
		return err
	}
	got, err := s.counted(spannerdb.Uncounted(ctx), "hot")
	if err != nil {
		return err
	}
	// The count stays exact once the rollup has folded too.
	time.Sleep(s.Config.Counters.RollupInterval + time.Second)
	v, err := s.counted(spannerdb.Uncounted(ctx), "hot")
	if err != nil {
		return err
	}
	r.final = v.Likes
	r.exact = v.Likes == int64(o.reactions) && got.Likes == int64(o.reactions)
	r.accepted = float64(o.reactions) / load.Elapsed.Seconds()
	r.applied = float64(o.reactions) / appliedIn.Seconds()
	// Spanner work up to the moment everything was applied, the rollup's
	// folds in that window included.
	r.cost = newCost(after.Minus(before), tables0, tables1, &mem0, &mem1, m1-m0, b1-b0, cpu, o.reactions)
	r.commitsPer1000 = float64(after.Commits-before.Commits) * 1000 / float64(o.reactions)
	r.messagesPer1000 = float64(m1-m0) * 1000 / float64(o.reactions)
	if m1 > m0 {
		r.eventsPerMessage = float64(o.reactions) / float64(m1-m0)
	}
	r.shards, _ = s.Folds.ShardCount(ctx, "hot")
	if !r.exact {
		return fmt.Errorf("count not exact: %d likes applied (final %d), want %d", got.Likes, v.Likes, o.reactions)
	}
	return nil
}

func countsLatency(ctx context.Context, s *stack, srv *benchstack.Server, o options, r *result) error {
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%d", i)
	}
	ids[0] = "hot"
	// In canonical order: any other is answered with a redirect to it.
	slices.Sort(ids)
	url := srv.URL + "/v1/counts?ids=" + strings.Join(ids, ",")
	client := newClient(4)
	for i := 0; i < 20; i++ {
		do(client, "GET", url, "", "")
	}
	before := otelcount.Global().Spanner()
	lat := make([]time.Duration, 0, o.countsReqs)
	for i := 0; i < o.countsReqs; i++ {
		t0 := time.Now()
		code, b, err := do(client, "GET", url, "", "")
		if err != nil || code != 200 {
			return fmt.Errorf("counts: %d %s %v", code, b, err)
		}
		lat = append(lat, time.Since(t0))
	}
	after := otelcount.Global().Spanner()
	r.readsPerRequest = float64(after.Reads-before.Reads) / float64(o.countsReqs)
	r.countsP50, r.P99 = benchstack.Percentiles(lat)
	return nil
}

// freshness: one write at a time on its own item, then anonymous counts
// polled every 5 ms until the like shows.
func freshness(ctx context.Context, s *stack, srv *benchstack.Server, o options, r *result) error {
	client := newClient(2)
	tok, err := s.token("fresh-writer", false)
	if err != nil {
		return err
	}
	var lat []time.Duration
	for i := 0; i < o.freshness; i++ {
		item := fmt.Sprintf("fresh-%d", i)
		code, b, err := do(client, "PUT", srv.URL+"/v1/reactions/"+item, tok, `{"reaction":"like"}`)
		if err != nil || code != 200 {
			return fmt.Errorf("freshness write: %d %s %v", code, b, err)
		}
		accepted := time.Now()
		for {
			_, b, err := do(client, "GET", srv.URL+"/v1/counts?ids="+item, "", "")
			if err != nil {
				return err
			}
			if strings.Contains(string(b), `"likes":1`) {
				lat = append(lat, time.Since(accepted))
				break
			}
			if time.Since(accepted) > 30*time.Second {
				return errors.New("freshness: a like not visible after 30 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r.freshP50, r.freshP99 = benchstack.Percentiles(lat)
	return nil
}

func printTable(w io.Writer, o options, rs []result) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	row := func(name string, f func(r result) string) {
		fmt.Fprintf(w, "%-50s", name)
		for _, r := range rs {
			fmt.Fprintf(w, " %18s", f(r))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nCounter engine on the local stack: %d hot-item reactions, %d clients, 2 cores\n\n", o.reactions, o.concurrency)
	row("", func(r result) string { return r.mode })
	row("1. hot item: reactions/s accepted (HTTP 200)", func(r result) string { return fmt.Sprintf("%.0f", r.accepted) })
	row("   reactions/s applied end to end", func(r result) string { return fmt.Sprintf("%.0f", r.applied) })
	row("   final count exact", func(r result) string { return fmt.Sprintf("%v (%d)", r.exact, r.final) })
	row("   shard count of the hot item after the run", func(r result) string { return fmt.Sprint(r.shards) })
	row("2. Spanner rw commits per 1,000 reactions", func(r result) string { return fmt.Sprintf("%.0f", r.commitsPer1000) })
	row("   Pub/Sub messages per 1,000 reactions", func(r result) string { return fmt.Sprintf("%.0f", r.messagesPer1000) })
	row("   events per message", func(r result) string { return fmt.Sprintf("%.1f", r.eventsPerMessage) })
	row("3. GET /v1/counts, 50 ids: p50 / p99", func(r result) string { return ms(r.countsP50) + " / " + ms(r.P99) })
	row("   Spanner reads per request", func(r result) string { return fmt.Sprintf("%.2f", r.readsPerRequest) })
	row("4. freshness (write → anonymous count): p50 / p99", func(r result) string { return ms(r.freshP50) + " / " + ms(r.freshP99) })
	costRows(rs, row)
}
