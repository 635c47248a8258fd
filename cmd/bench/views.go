package main

// The views benchmark: watches recorded through the public API on one hot
// video, counted end to end (POST /v1/history → Pub/Sub → ApplyViews →
// Spanner), once with each watch its own message and its own transaction
// (the path before batching, rebuilt here: History with no group commit and
// ApplyViews counting each batch at once), then batched, each batch counted
// in a transaction of its own ("direct", rebuilt here too) and staged in
// Bigtable for the views fold ("folded", the deployed path), at two client
// counts; then the
// precision of uniqueViewers at one viewer a watch (the same run, through the
// API), 100,000 (through the counter store: shards, fold, read) and
// 1,000,000 (the sketch code alone), with the bytes a sketch takes.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/cmd/internal/benchstack"
	applyhistoryfn "github.com/videngage/engagement/functions/applyhistory"
	applyviewsfn "github.com/videngage/engagement/functions/applyviews"
	historyfn "github.com/videngage/engagement/functions/history"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/claimstore"
	"github.com/videngage/engagement/shared/views/viewstore"
)

type viewsOptions struct {
	watches  int // distinct watches of the hot video
	watchers int // concurrent clients
	// moreWatchers is the concurrent clients of a second batched run (0:
	// none): how batch size, commits and messages scale with concurrency.
	moreWatchers int
	// baseline runs the per-watch path (no group commit) first.
	baseline bool
	retryOne int // one watch in retryOne is sent twice (a client's retry)
	store    int // distinct viewers through the counter store
	sketch   int // distinct viewers through the sketch alone
	timeout  time.Duration
}

type viewsResult struct {
	mode              string
	counting          string
	watchers          int
	requests          int
	accepted, applied float64 // views/s
	exact             bool
	final             int64
	commitsPer1000    float64
	rowsPer1000       float64
	readsPer1000      float64
	messagesPer1000   float64
	messageBytes      float64       // history-events data per 1,000 views
	cpu               time.Duration // process CPU per view, clients included
	// historyPush and viewsPush are the time ApplyHistory and ApplyViews
	// held a message, on average.
	historyPush, viewsPush time.Duration
	watchesPerMessage      float64
	unique                 int64
	sketchBytes            int64
	// drain is from the last watch accepted to the count exact.
	drain time.Duration
}

// recordViews notes the deployed path's figures (batched, folded) for -costs.
func recordViews(r viewsResult) {
	record("view.cpu_us", float64(r.cpu.Microseconds()), "µs",
		"process CPU per watch until counted: History, ApplyHistory, ApplyViews, Rollup and the benchmark's own clients in one process (an upper bound)")
	record("view.spanner_commits_per_1000", r.commitsPer1000, "commits", "Spanner read-write commits per 1,000 views")
	record("view.spanner_row_writes_per_1000", r.rowsPer1000, "rows", "Spanner row writes (mutations) per 1,000 views")
	record("view.spanner_reads_per_1000", r.readsPer1000, "calls", "Spanner read and query calls per 1,000 views")
	record("view.messages_per_1000", r.messagesPer1000, "messages", "Pub/Sub messages published per 1,000 views (history-events and counter-events)")
	record("view.message_bytes_per_1000", r.messageBytes, "bytes", "history-events message data per 1,000 views")
	record("view.clients", float64(r.watchers), "clients", "concurrent clients of the run")
	record("view.accepted_per_s", r.accepted, "requests/s", "watches answered 202 per second (retries included), one serving process")
	record("view.apply_history_push_ms", float64(r.historyPush.Microseconds())/1000, "ms", "time ApplyHistory held a history message of the run (one push at a time)")
	record("view.apply_views_push_ms", float64(r.viewsPush.Microseconds())/1000, "ms", "time ApplyViews held a history message of the run (one push at a time)")
	record("view.applied_per_s", r.applied, "views/s", "views counted end to end per second, one ApplyHistory and one ApplyViews taking one push at a time each")
}

func runViewsBench(ctx context.Context, es *emulators.Stack, o viewsOptions) error {
	var rs []viewsResult
	type run struct {
		batching, counting string
		watchers           int
	}
	var runs []run
	if o.baseline {
		runs = append(runs, run{"off", "direct", o.watchers})
	}
	clients := []int{o.watchers}
	if o.moreWatchers > 0 {
		clients = append(clients, o.moreWatchers)
	}
	for _, n := range clients {
		runs = append(runs, run{"on", "direct", n}, run{"on", "folded", n})
	}
	batched := -1 // the folded run at o.watchers clients
	for i, rn := range runs {
		fmt.Fprintf(os.Stderr, "bench: views, batching %s, counting %s, %d clients…\n", rn.batching, rn.counting, rn.watchers)
		mo := o
		mo.watchers = rn.watchers
		r, err := viewsMode(ctx, es, rn.batching, rn.counting, 10+i, mo)
		if err != nil {
			return fmt.Errorf("views, batching %s, counting %s, %d clients: %w", rn.batching, rn.counting, rn.watchers, err)
		}
		if batched < 0 && rn.counting == "folded" {
			batched = len(rs)
			recordViews(r)
		}
		rs = append(rs, r)
	}
	fmt.Fprintf(os.Stderr, "bench: unique viewers through the counter store…\n")
	store, err := storeViewers(ctx, es, o.store)
	if err != nil {
		return err
	}
	sk := sketchViewers(o.sketch)
	b := rs[batched]
	printViews(os.Stdout, o, rs, []precision{b.precision(int64(o.watches), fmt.Sprintf("API, the folded run, %d clients", b.watchers)), store, sk})
	return nil
}

// viewsPath is how the views stack publishes and counts watches: the
// deployed path (both true) or a baseline the benchmark compares it with.
type viewsPath struct {
	// batched publishes the watches an instance accepts together (group
	// commit, historyfn.Batching); false publishes each watch alone.
	batched bool
	// folded stages each batch's views for the rollup's views fold; false
	// counts them at once, in a transaction of the batch's own.
	folded bool
}

// deployed is the views path as deployed.
var deployed = viewsPath{batched: true, folded: true}

// directViews counts a batch's view events at once, in a transaction of
// the batch's own: the baseline the views fold replaced.
type directViews struct{ counters *outboxstore.Store }

func (d directViews) Put(ctx context.Context, _ string, evs []events.Event) error {
	_, err := d.counters.Apply(ctx, evs)
	return err
}

// viewsStack provisions a world and serves the views path on it.
func viewsStack(ctx context.Context, es *emulators.Stack, srv *benchstack.Server, project string, env map[string]string, path viewsPath) (*benchstack.Stack, func(), error) {
	cfg, teardown, err := benchstack.Provision(ctx, es, srv, project, env)
	if err != nil {
		return nil, nil, err
	}
	st, closeStack, err := newViewsStack(ctx, cfg, srv, path)
	if err != nil {
		teardown()
		return nil, nil, err
	}
	return st, func() { closeStack(); teardown() }, nil
}

// newViewsStack serves History, ApplyHistory and ApplyViews over a
// localstack, on a provisioned world whose subscriptions push to srv.
func newViewsStack(ctx context.Context, cfg *config.Config, srv *benchstack.Server, path viewsPath) (*benchstack.Stack, func(), error) {
	var more *host.Clients
	var folding sync.WaitGroup
	stopFold := func() {}
	st, err := benchstack.New(ctx, "bench", cfg, srv, func(st *benchstack.Stack, mux *http.ServeMux) error {
		var err error
		more, err = host.New(ctx, cfg, host.NeedBigtable|host.NeedFirestore)
		if err != nil {
			return err
		}
		var grouped batch.GroupCommitOptions
		if path.batched {
			grouped = historyfn.Batching(cfg)
		}
		store := historystore.New(more.Bigtable)
		h := historyfn.New(historyfn.Deps{
			Verifier:  st.Clients.Verifier,
			Store:     store,
			Settings:  historystore.NewSettings(more.Firestore),
			Publisher: bus.NewPublisher(st.Clients.PubSub, cfg.PubSub.HistoryTopic),
			Batch:     grouped,
			Tokens:    history.NewPageTokens(cfg.HTTP.PageTokenSecret),
		})
		mux.Handle("/v1/history", httpx.Standard("History", cfg.Project, nil, cfg.HTTP.RequestTimeout)(h))
		mux.Handle("/push/ApplyHistory", applyhistoryfn.New(store, nil))
		staging := viewstore.NewStaging(more.BigtableTx)
		var sink applyviewsfn.Views = directViews{st.Outbox}
		if path.folded {
			sink = staging
		}
		mux.Handle("/push/ApplyViews", applyviewsfn.New(claimstore.NewClaims(more.BigtableTx, more.Config.History.ViewWindow), sink, history.NewViewerHasher(more.Config.History.ViewerHashKey), applyviewsfn.Eligibility{}, nil, nil))
		// The rollup's views fold, every VIEWS_FOLD_INTERVAL.
		fctx, cancel := context.WithCancel(context.Background())
		stopFold = func() { cancel(); folding.Wait() }
		folding.Go(func() {
			t := time.NewTicker(cfg.Counters.ViewsFoldInterval)
			defer t.Stop()
			for {
				select {
				case <-fctx.Done():
					return
				case <-t.C:
					if _, err := views.Fold(fctx, staging, st.Outbox, views.FoldOptions{Hi: counter.Parts}); err != nil && fctx.Err() == nil {
						fmt.Fprintln(os.Stderr, "bench: views fold:", err)
					}
				}
			}
		})
		return nil
	})
	if err != nil {
		if more != nil {
			more.Close()
		}
		return nil, nil, err
	}
	return st, func() { stopFold(); st.Close(); more.Close() }, nil
}

func viewsMode(ctx context.Context, es *emulators.Stack, mode, counting string, n int, o viewsOptions) (viewsResult, error) {
	r := viewsResult{mode: map[string]string{"off": "off (per watch)", "on": "on"}[mode], counting: counting, watchers: o.watchers}
	srv, err := benchstack.StartServer()
	if err != nil {
		return r, err
	}
	defer srv.Close()
	st, closeAll, err := viewsStack(ctx, es, srv, fmt.Sprintf("bench-%d-%d", os.Getpid(), n), map[string]string{
		"RATE_LIMITS": "off",
	}, viewsPath{batched: mode == "on", folded: counting == "folded"})
	if err != nil {
		return r, err
	}
	defer closeAll()

	// A user's watches of a video within the viewing window are one view:
	// every watch is a viewer's own.
	tokens := make([]string, o.watches)
	for i := range tokens {
		if tokens[i], err = st.Issuer.Mint(fmt.Sprintf("viewer-%d", i)); err != nil {
			return r, err
		}
	}
	client := newClient(o.watchers)
	// Warm up: connections, the key set, Firestore, one counted view.
	if code, b, err := do(client, "POST", srv.URL+"/v1/history", tokens[0], `{"videoId":"warmup"}`); err != nil || code != 202 {
		return r, fmt.Errorf("warm-up: %d %s %v", code, b, err)
	}
	if err := waitViews(ctx, st, "warmup", 1, 30*time.Second); err != nil {
		return r, err
	}

	// Watch i is viewer i's, within the viewing window; one in
	// retryOne is sent a second time right after (a client's retry).
	base := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	var jobs []int
	for i := range o.watches {
		jobs = append(jobs, i)
		if o.retryOne > 0 && i%o.retryOne == 0 {
			jobs = append(jobs, i)
		}
	}
	r.requests = len(jobs)
	topic := st.Config.PubSub.HistoryTopic
	before := otelcount.Global().Spanner()
	p0 := otelcount.Global().Published()
	m0 := p0.Messages[topic] + p0.Messages[st.Config.PubSub.CounterTopic]
	hb0 := p0.Bytes[topic]
	hn0, hbusy0 := srv.Pushes("ApplyHistory")
	vn0, vbusy0 := srv.Pushes("ApplyViews")
	cpu0 := processCPU()
	start := time.Now()
	failures, first := sendAll(client, o.watchers, len(jobs), http.StatusAccepted, func(j int) (string, string, string, string) {
		i := jobs[j]
		body := fmt.Sprintf(`{"videoId":"hot","watchedAt":%q}`, base.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano))
		return http.MethodPost, srv.URL + "/v1/history", tokens[i], body
	})
	acceptedIn := time.Since(start)
	if failures > 0 {
		return r, fmt.Errorf("%d watches failed, first: %v", failures, first)
	}
	if err := waitViews(ctx, st, "hot", int64(o.watches), o.timeout); err != nil {
		return r, err
	}
	appliedIn := time.Since(start)
	r.drain = appliedIn - acceptedIn
	after := otelcount.Global().Spanner()
	r.cpu = (processCPU() - cpu0) / time.Duration(o.watches)
	hn1, hbusy1 := srv.Pushes("ApplyHistory")
	vn1, vbusy1 := srv.Pushes("ApplyViews")
	r.historyPush = (hbusy1 - hbusy0) / time.Duration(max(hn1-hn0, 1))
	r.viewsPush = (vbusy1 - vbusy0) / time.Duration(max(vn1-vn0, 1))
	p1 := otelcount.Global().Published()
	m1 := p1.Messages[topic] + p1.Messages[st.Config.PubSub.CounterTopic]
	r.messageBytes = float64(p1.Bytes[topic]-hb0) * 1000 / float64(o.watches)
	// Exact once folded, and nothing more arrives.
	time.Sleep(st.Config.Counters.RollupInterval + time.Second)
	c, err := st.Counts.Counts(ctx, []string{"hot"}, nil, 0)
	if err != nil {
		return r, err
	}
	r.final = c.Values["hot"].Views
	r.exact = r.final == int64(o.watches)
	r.unique = c.Values["hot"].UniqueViewers
	if r.sketchBytes, err = sketchBytes(ctx, st.DB, "hot"); err != nil {
		return r, err
	}
	views := float64(o.watches)
	r.accepted = float64(len(jobs)) / acceptedIn.Seconds()
	r.applied = views / appliedIn.Seconds()
	r.commitsPer1000 = float64(after.Commits-before.Commits) * 1000 / views
	r.rowsPer1000 = float64(after.RowWrites-before.RowWrites) * 1000 / views
	r.readsPer1000 = float64(after.Reads-before.Reads) * 1000 / views
	r.messagesPer1000 = float64(m1-m0) * 1000 / views
	if m1 > m0 {
		r.watchesPerMessage = float64(len(jobs)) / float64(m1-m0)
	}
	if !r.exact {
		return r, fmt.Errorf("views not exact: %d, want %d", r.final, o.watches)
	}
	return r, nil
}

// waitViews waits until key has want views counted (snapshot and shards).
func waitViews(ctx context.Context, st *benchstack.Stack, key string, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, _, err := st.Counts.Totals(ctx, []string{key})
		if err != nil {
			return err
		}
		got := c[key].Views
		if got == want {
			return nil
		}
		if got > want {
			return fmt.Errorf("%s: %d views counted, more than the %d watches", key, got, want)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d views counted after %v", key, got, want, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sketchBytes is the size of key's stored sketches: snapshot plus shards.
func sketchBytes(ctx context.Context, db *spannerdb.DB, key string) (int64, error) {
	var n int64
	err := db.Single().Query(ctx, spanner.Statement{
		SQL: `SELECT COALESCE(LENGTH(Viewers), 0) FROM Counters WHERE CounterKey = @k
UNION ALL SELECT COALESCE(LENGTH(Viewers), 0) FROM CounterShards WHERE CounterKey = @k`,
		Params: map[string]any{"k": key},
	}).Do(func(r *spanner.Row) error {
		var b int64
		if err := r.Columns(&b); err != nil {
			return err
		}
		n += b
		return nil
	})
	return n, err
}

type precision struct {
	viewers, estimate, bytes int64
	path                     string
}

func (r viewsResult) precision(viewers int64, path string) precision {
	return precision{viewers: viewers, estimate: r.unique, bytes: r.sketchBytes, path: path}
}

// storeViewers sends n distinct viewers through the counter store as the
// batches ApplyViews makes (500 a transaction, spread over the shards),
// folds, and reads the estimate the counts API would answer.
func storeViewers(ctx context.Context, es *emulators.Stack, n int) (precision, error) {
	p := precision{viewers: int64(n), path: "counter store: 500-viewer batches, shards, fold, read"}
	srv, err := benchstack.StartServer()
	if err != nil {
		return p, err
	}
	defer srv.Close()
	cfg, teardown, err := benchstack.Provision(ctx, es, srv, fmt.Sprintf("bench-%d-store", os.Getpid()), nil)
	if err != nil {
		return p, err
	}
	defer teardown()
	db, err := spannerdb.New(ctx, cfg)
	if err != nil {
		return p, err
	}
	defer db.Client.Close()
	outbox, folds, counts := outboxstore.New(db), foldstore.New(db, foldstore.Options{}), countstore.New(db)
	for i := 0; i < n; {
		var hs []uint64
		for ; i < n && len(hs) < 500; i++ {
			hs = append(hs, history.NewViewerHasher("bench").Hash(fmt.Sprintf("store-viewer-%d", i)))
		}
		e := events.Event{ID: fmt.Sprintf("views-store-%d", i), Kind: events.KindCounterDelta,
			Deltas:  []counter.Delta{{Key: "hot", Field: counter.Views, N: int64(len(hs))}},
			Viewers: map[string][]uint64{"hot": hs}}
		if _, err := outbox.Apply(ctx, []events.Event{e}); err != nil {
			return p, err
		}
		if i%20000 == 0 { // fold now and then, as the rollup does
			if _, err := folds.Fold(ctx); err != nil {
				return p, err
			}
		}
	}
	if _, err := folds.Fold(ctx); err != nil {
		return p, err
	}
	c, err := counts.Counts(ctx, []string{"hot"}, nil, 0)
	if err != nil {
		return p, err
	}
	p.estimate = c.Values["hot"].UniqueViewers
	p.bytes, err = sketchBytes(ctx, db, "hot")
	return p, err
}

// sketchViewers adds n distinct viewers to a sketch directly.
func sketchViewers(n int) precision {
	v := views.NewViewers()
	for i := range n {
		v.Add(history.NewViewerHasher("bench").Hash(fmt.Sprintf("sketch-viewer-%d", i)))
	}
	return precision{viewers: int64(n), estimate: v.Estimate(), bytes: int64(len(v.Bytes())), path: "the sketch code alone"}
}

func printViews(w io.Writer, o viewsOptions, rs []viewsResult, ps []precision) {
	row := func(name string, f func(r viewsResult) string) {
		fmt.Fprintf(w, "%-44s", name)
		for _, r := range rs {
			fmt.Fprintf(w, " %16s", f(r))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nViews on the local stack: %d watches of one video by %d users (%d requests with retries), 2 cores\n\n",
		o.watches, o.watches, rs[0].requests)
	row("history batching", func(r viewsResult) string { return r.mode })
	row("views counting", func(r viewsResult) string { return r.counting })
	row("concurrent clients", func(r viewsResult) string { return fmt.Sprint(r.watchers) })
	row("1. views/s accepted (HTTP 202)", func(r viewsResult) string { return fmt.Sprintf("%.0f", r.accepted) })
	row("   views/s applied end to end", func(r viewsResult) string { return fmt.Sprintf("%.0f", r.applied) })
	row("   last watch accepted → count exact (s)", func(r viewsResult) string { return fmt.Sprintf("%.1f", r.drain.Seconds()) })
	row("   final count exact", func(r viewsResult) string { return fmt.Sprintf("%v (%d)", r.exact, r.final) })
	row("2. Spanner rw commits per 1,000 views", func(r viewsResult) string { return fmt.Sprintf("%.1f", r.commitsPer1000) })
	row("   commits per message", func(r viewsResult) string {
		return fmt.Sprintf("%.2f", r.commitsPer1000/r.messagesPer1000)
	})
	row("   Spanner rows written per 1,000 views", func(r viewsResult) string { return fmt.Sprintf("%.1f", r.rowsPer1000) })
	row("3. Pub/Sub messages per 1,000 views", func(r viewsResult) string { return fmt.Sprintf("%.1f", r.messagesPer1000) })
	row("   requests per message", func(r viewsResult) string { return fmt.Sprintf("%.1f", r.watchesPerMessage) })
	row("   history-events bytes per 1,000 views", func(r viewsResult) string { return fmt.Sprintf("%.0f", r.messageBytes) })
	row("   ApplyHistory / ApplyViews ms a message", func(r viewsResult) string {
		return fmt.Sprintf("%.1f / %.1f", float64(r.historyPush.Microseconds())/1000, float64(r.viewsPush.Microseconds())/1000)
	})
	row("4. process CPU per view (clients too)", func(r viewsResult) string { return fmt.Sprintf("%d µs", r.cpu.Microseconds()) })
	if o.baseline && rs[0].applied > 0 {
		for _, r := range rs[1:] {
			fmt.Fprintf(w, "\nend-to-end gain, batched %s at %d clients: %.1f× the per-watch path", r.counting, r.watchers, r.applied/rs[0].applied)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n4. uniqueViewers (HyperLogLog++, precision %d)\n", views.ViewersPrecision)
	fmt.Fprintf(w, "%12s %12s %10s %12s  %s\n", "viewers", "estimate", "error", "sketch", "through")
	for _, p := range ps {
		rel := 100 * math.Abs(float64(p.estimate-p.viewers)) / float64(p.viewers)
		fmt.Fprintf(w, "%12d %12d %9.3f%% %10d B  %s\n", p.viewers, p.estimate, rel, p.bytes, p.path)
	}
}
