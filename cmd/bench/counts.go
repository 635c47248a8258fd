package main

// The counts read benchmark: GET /v1/counts (public) and GET /v1/me/counts
// (signed in), 50 ids a request, concurrent readers, with the instance cache
// and shared reads off ("no cache": every request reads Spanner itself) and
// on ("after"), in one world, side by side. Hot ids are being liked all through the run (so
// their counters keep moving), cold ones are not.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/videngage/engagement/cmd/internal/benchstack"
	countsfn "github.com/videngage/engagement/functions/counts"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/session"
)

var (
	countsReaders   = flag.Int("counts-readers", 16, "counts benchmark: concurrent readers")
	countsRequests  = flag.Int("counts-requests", 800, "counts benchmark: measured requests per phase")
	countsHot       = flag.Int("counts-hot", 20, "counts benchmark: hot ids (being liked; 10 in every request)")
	countsCold      = flag.Int("counts-cold", 1000, "counts benchmark: cold ids (40 in every request)")
	countsWrites    = flag.Int("counts-writes", 10, "counts benchmark: likes per second on the hot ids during the reads")
	countsOnly      = flag.Bool("counts-only", false, "run only the counts read benchmark")
	countsRounds    = flag.Int("counts-rounds", 4, "counts benchmark: rounds in which the settings take turns")
	countsOnlyThese = flag.String("counts-settings", "", `counts benchmark: the settings to measure, comma-separated ("no cache", "by key", "after"; default all)`)
	countsInFlight  = flag.String("counts-own-in-flight", "", "counts benchmark: COUNTS_OWN_IN_FLIGHT of the \"after\" column (default: the configuration's)")
	sessionClients  = flag.Int("counts-session-clients", 64, "counts benchmark, read after write: concurrent clients, each reading its counts right after its own write (0: skip)")
	sessionRequests = flag.Int("counts-session-requests", 1280, "counts benchmark, read after write: measured reads per side (with and without the Session-Token)")
	mixedRequests   = flag.Int("counts-mixed-requests", 1280, "counts benchmark, mixed reads after writes: measured reads per setting, half the clients sending the Session-Token and half not, at once (0: skip)")
	sessionOnly     = flag.Bool("counts-session-only", false, "counts benchmark: only the read-after-write phase")
)

// countingStore counts the Spanner reads of one Counts handler: each Public
// call is one read of public counts (two key reads), each OwnMany call one
// read of its callers' rows (two round trips of key reads however many
// callers it serves). It also times the OwnMany calls, weighted by the
// callers each serves, and (through timed) the handler's answers: what a
// signed-in read's time is made of.
type countingStore struct {
	countsfn.Store
	queries atomic.Int64
	// ownNanos sums each OwnMany call's duration once per query it
	// answers, and ownQueries the queries.
	ownNanos, ownQueries atomic.Int64
	// handlerNanos sums the handler's time per request, and handled the
	// requests.
	handlerNanos, handled atomic.Int64
	// authNanos sums the time the handler spent verifying the caller's
	// token, and queueNanos each query's wait from then until the OwnMany
	// call that answers it starts (the batch's queue), over queued
	// queries.
	authNanos, queueNanos, queued atomic.Int64
	// batches counts the OwnMany calls, strongBatches those that read strongly (a query
	// names no timestamp), and tokensReadStrongly the queries that name a
	// timestamp (a Session-Token's) read in them.
	batches, strongBatches, tokensReadStrongly atomic.Int64
	// verified holds, by user id, when the handler last verified the
	// user's token: each client has one request in flight at a time.
	verified sync.Map
}

// timedVerifier is a Verifier whose calls c times.
type timedVerifier struct {
	countsfn.Verifier
	c *countingStore
}

func (v timedVerifier) FromRequest(r *http.Request) (auth.User, error) {
	t0 := time.Now()
	u, err := v.Verifier.FromRequest(r)
	t1 := time.Now()
	v.c.authNanos.Add(int64(t1.Sub(t0)))
	if err == nil {
		v.c.verified.Store(u.ID, t1)
	}
	return u, err
}

// timed is h, with its time per request added to c.
func (c *countingStore) timed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		h.ServeHTTP(w, r)
		c.handlerNanos.Add(int64(time.Since(t0)))
		c.handled.Add(1)
	})
}

func (c *countingStore) Public(ctx context.Context, ids []string, maxStaleness time.Duration) (countstore.Snapshot, error) {
	c.queries.Add(1)
	return c.Store.Public(ctx, ids, maxStaleness)
}

func (c *countingStore) OwnMany(ctx context.Context, qs []countstore.OwnQuery) ([]countstore.Own, error) {
	c.queries.Add(1)
	t0 := time.Now()
	for _, q := range qs {
		if t, ok := c.verified.LoadAndDelete(q.Viewer); ok {
			c.queueNanos.Add(int64(t0.Sub(t.(time.Time))))
			c.queued.Add(1)
		}
	}
	strong, named := false, int64(0)
	for _, q := range qs {
		if q.At.IsZero() {
			strong = true
		} else {
			named++
		}
	}
	c.batches.Add(1)
	if strong {
		c.strongBatches.Add(1)
		c.tokensReadStrongly.Add(named)
	}
	out, err := c.Store.OwnMany(ctx, qs)
	c.ownNanos.Add(int64(time.Since(t0)) * int64(len(qs)))
	c.ownQueries.Add(int64(len(qs)))
	return out, err
}

type readResult struct {
	p50, p99 time.Duration
	per1000  float64
	// wire1000 is every Spanner read call the process made during the
	// phase (the writers' and the cache refreshes' included) per 1,000
	// reads.
	wire1000 float64
	// cpu is the process's CPU per read: the functions' and the
	// benchmark's own readers and writers (an upper bound of a read's).
	cpu time.Duration
	// lead0 and lead1 are the emulator's clock lead before the setting's
	// first round and after its last: what each strong read waits
	// (benchstack.SpannerClockLead).
	lead0, lead1 time.Duration
	perSec       float64
	failed       int // answers other than 200 (503 when Spanner is too slow)
	// The mean signed-in read, in parts: its time in the client
	// (meanClient), in the handler (meanHandler), and in the store read
	// of the batch that answered it (meanOwn). The handler's time less
	// the store read's is the wait for a batch; the client's less the
	// handler's is HTTP and scheduling in the one process.
	meanClient, meanHandler, meanOwn time.Duration
	// meanAuth is the handler's time verifying the caller's token, and
	// meanQueue a query's wait from then until its batch's store read
	// starts.
	meanAuth, meanQueue time.Duration
}

// The settings, side by side: "no cache" reads Spanner for every request, a
// signed-in caller's rows by key, each request alone; "by key" holds the
// public counts in the instance and reads a signed-in caller's rows and the
// moved counters by key (countstore.Store.OwnMany), each request alone;
// "after" reads them by key, the concurrent signed-in requests together
// (COUNTS_OWN_IN_FLIGHT).
var countsSettings = []string{"no cache", "by key", "after"}

// selectedSettings are the settings -counts-settings names, in the order of
// countsSettings.
func selectedSettings() ([]string, error) {
	if *countsOnlyThese == "" {
		return countsSettings, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*countsOnlyThese, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(countsSettings, n) {
			return nil, fmt.Errorf("-counts-settings: no setting %q (have %s)", n, strings.Join(countsSettings, ", "))
		}
		want[n] = true
	}
	var out []string
	for _, n := range countsSettings {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

func countsReadBench(ctx context.Context, es *emulators.Stack, cpuProfile string) error {
	fmt.Fprintln(os.Stderr, "bench: counts reads…")
	settings, err := selectedSettings()
	if err != nil {
		return err
	}
	srv, err := benchstack.StartServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	env := map[string]string{"RATE_LIMITS": "off"}
	if *countsInFlight != "" {
		env["COUNTS_OWN_IN_FLIGHT"] = *countsInFlight
	}
	cfg, teardown, err := benchstack.Provision(ctx, es, srv, fmt.Sprintf("bench-counts-%d", os.Getpid()), env)
	if err != nil {
		return err
	}
	defer teardown()
	stores := map[string]*countingStore{}
	s, err := newStack(ctx, cfg, srv, func(st *benchstack.Stack, mux *http.ServeMux) error {
		// One code path, three settings: the cache TTL 0 turns the instance
		// cache and the shared reads off, OwnInFlight 0 the batched reads.
		for _, name := range countsSettings {
			d, err := countsfn.Build(st.Clients)
			if err != nil {
				return err
			}
			cs := &countingStore{Store: st.Counts}
			if name == "no cache" {
				d.CacheTTL = 0
			}
			if name != "after" {
				d.OwnInFlight = 0
			}
			d.Store, stores[name] = cs, cs
			d.Verifier = timedVerifier{d.Verifier, cs}
			mux.Handle("/"+slug(name)+"/", cs.timed(http.StripPrefix("/"+slug(name), countsfn.New(d))))
		}
		// The mixed phase's baseline (mixedBaseline): the deployed handler
		// reading each request alone, into one batcher below it that reads
		// the requests waiting together whatever they carry.
		d, err := countsfn.Build(st.Clients)
		if err != nil {
			return err
		}
		cs := &countingStore{Store: st.Counts}
		d.OwnInFlight = 0
		d.Store, stores[mixedBaseline] = &oneBatchStore{countingStore: cs, own: batch.NewBatcher(batch.BatcherOptions{
			MaxItems: 64, MaxInFlight: cfg.HTTP.CountsOwnInFlight, Timeout: 10 * time.Second,
		}, cs.OwnMany)}, cs
		d.Verifier = timedVerifier{d.Verifier, cs}
		mux.Handle("/"+slug(mixedBaseline)+"/", cs.timed(http.StripPrefix("/"+slug(mixedBaseline), countsfn.New(d))))
		return nil
	})
	if err != nil {
		return err
	}
	defer s.Close()

	hot := make([]string, *countsHot)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot-%d", i)
	}
	cold := make([]string, *countsCold)
	for i := range cold {
		cold[i] = fmt.Sprintf("cold-%04d", i)
	}
	if err := seedCounts(ctx, s, append(append([]string{}, hot...), cold...)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: counts reads: %d counters seeded\n", len(hot)+len(cold))

	client := newClient(*countsReaders + 4)
	// Each reader likes a few hot and cold ids first: its own rows.
	tokens := make([]string, *countsReaders)
	for i := range tokens {
		if tokens[i], err = s.token(fmt.Sprintf("reader-%d", i), false); err != nil {
			return err
		}
		for _, id := range []string{hot[i%len(hot)], cold[i*7%len(cold)]} {
			if code, b, err := do(client, "PUT", srv.URL+"/v1/reactions/"+id, tokens[i], `{"reaction":"like"}`); err != nil || code != 200 {
				return fmt.Errorf("reader like: %d %s %v", code, b, err)
			}
		}
	}

	// The hot ids are liked all through the reads.
	wctx, stopWriting := context.WithCancel(ctx)
	var written, writeErrs atomic.Int64
	var writers sync.WaitGroup
	writers.Add(1)
	go func() {
		defer writers.Done()
		t := time.NewTicker(time.Second / time.Duration(max(*countsWrites, 1)))
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			tok, err := s.token(fmt.Sprintf("fan-%d", n), false)
			if err == nil {
				var code int
				code, _, err = do(client, "PUT", srv.URL+"/v1/reactions/"+hot[n%len(hot)], tok, `{"reaction":"like"}`)
				if err == nil && code != 200 {
					err = fmt.Errorf("status %d", code)
				}
			}
			if err != nil {
				writeErrs.Add(1)
				continue
			}
			written.Add(1)
		}
	}()

	// The settings take turns, a share of the requests each round, so
	// that each meets the emulator in the same state: the emulator's clock
	// lead, which every strong read waits for, grows with the calls it
	// serves (benchstack.SpannerClockLead).
	results := map[string]readResult{}
	var firstErr error
	kinds := []bool{false, true}
	if *sessionOnly {
		kinds, settings = nil, nil
	}
	var session sessionResult
	var mixed mixedResult
	if *sessionClients > 0 {
		session, firstErr = sessionReads(ctx, s, newClient(*sessionClients+4), srv.URL, hot, cold, stores["after"])
		if firstErr == nil && *mixedRequests > 0 {
			mixed, firstErr = mixedReads(ctx, s, newClient(*sessionClients+4), srv.URL, hot, cold, stores)
		}
	}
	for _, signed := range kinds {
		path := func(name string) string {
			if signed {
				return srv.URL + "/" + slug(name) + "/v1/me/counts?ids="
			}
			return srv.URL + "/" + slug(name) + "/v1/counts?ids="
		}
		fmt.Fprintf(os.Stderr, "bench: counts reads, signed in %v…\n", signed)
		rounds := newSettingRounds()
		for round := 0; round < *countsRounds && firstErr == nil; round++ {
			for i := range settings {
				name := settings[(round+i)%len(settings)]
				stopProfile := func() error { return nil }
				if signed && round == 0 {
					// The signed-in setting's first measured round.
					if stopProfile, err = startProfile(cpuProfile, "", "me-counts-"+slug(name)); err != nil {
						firstErr = err
						break
					}
				}
				p, lead0, lead1, err := countsRound(ctx, s, client, path(name), tokens, signed, hot, cold, stores[name])
				if perr := stopProfile(); err == nil {
					err = perr
				}
				if err != nil {
					firstErr = err
					break
				}
				rounds.add(name, p, lead0, lead1)
			}
		}
		for _, name := range settings {
			results[fmt.Sprint(signed, name)] = rounds.result(name)
		}
	}
	stopWriting()
	writers.Wait()
	if firstErr != nil {
		return firstErr
	}
	if *sessionOnly {
		session.print(cfg.HTTP.CountsOwnInFlight, len(hot), len(cold))
		if *mixedRequests > 0 {
			mixed.print(cfg.HTTP.CountsOwnInFlight)
		}
		fmt.Printf("hot-id likes accepted during the reads: %d (errors %d)\n", written.Load(), writeErrs.Load())
		return nil
	}
	fresh := map[string][2]time.Duration{}
	for _, name := range settings {
		fmt.Fprintf(os.Stderr, "bench: counts freshness, %s…\n", name)
		p50, p99, err := publicFreshness(client, srv.URL+"/"+slug(name), srv.URL, s, slug(name))
		if err != nil {
			return err
		}
		fresh[name] = [2]time.Duration{p50, p99}
	}

	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	row := func(label string, f func(readResult) string, signed bool) {
		fmt.Printf("%-44s", label)
		for _, name := range settings {
			fmt.Printf(" %24s", f(results[fmt.Sprint(signed, name)]))
		}
		fmt.Println()
	}
	fmt.Printf("\nCounts reads on the local stack: 50 ids a request (10 of %d hot ids, liked %d/s during the reads; 40 of %d cold),\n%d concurrent readers, %d measured requests per phase, 2 cores\n\n",
		len(hot), *countsWrites, len(cold), *countsReaders, *countsRequests)
	labels := map[string]string{
		"no cache": "no instance cache", "by key": fmt.Sprintf("cache %v, own by key, alone", cfg.HTTP.CountsCacheTTL), "after": fmt.Sprintf("after (%d reads in flight)", cfg.HTTP.CountsOwnInFlight),
	}
	fmt.Printf("%-44s", "")
	for _, name := range settings {
		fmt.Printf(" %24s", labels[name])
	}
	fmt.Println()
	for _, signed := range []bool{false, true} {
		label := "GET /v1/counts (anonymous)"
		if signed {
			label = "GET /v1/me/counts (signed in)"
		}
		row(label+": p50 / p99", func(r readResult) string { return ms(r.p50) + " / " + ms(r.p99) }, signed)
		row("   store reads per 1,000 (a query, or 2 trips)", func(r readResult) string { return fmt.Sprintf("%.0f", r.per1000) }, signed)
		row("   Spanner read calls per 1,000 (all, wire)", func(r readResult) string { return fmt.Sprintf("%.0f", r.wire1000) }, signed)
		row("   reads/s", func(r readResult) string { return fmt.Sprintf("%.0f", r.perSec) }, signed)
		row("   process CPU per read (readers too)", func(r readResult) string { return fmt.Sprintf("%d µs", r.cpu.Microseconds()) }, signed)
		row("   failed reads (503)", func(r readResult) string { return fmt.Sprint(r.failed) }, signed)
		row("   emulator clock lead, first → last round", func(r readResult) string { return ms(r.lead0) + " → " + ms(r.lead1) }, signed)
	}
	fmt.Printf("%-44s", "freshness (like → public count): p50 / p99")
	for _, name := range settings {
		fmt.Printf(" %24s", ms(fresh[name][0])+" / "+ms(fresh[name][1]))
	}
	fmt.Println()
	b, a := results["false no cache"], results["false after"]
	if a.per1000 > 0 {
		fmt.Printf("\nanonymous: %.0f× fewer Spanner queries per read with the instance cache\n", b.per1000/a.per1000)
	}
	k, a := results["true by key"], results["true after"]
	if k.p99 > 0 && a.p99 > 0 {
		fmt.Printf("signed in: p99 %.1f× lower reading concurrent callers' rows together than each alone\n", float64(k.p99)/float64(a.p99))
	}
	fmt.Printf("hot-id likes accepted during the reads: %d (errors %d)\n", written.Load(), writeErrs.Load())
	if *sessionClients > 0 {
		session.print(cfg.HTTP.CountsOwnInFlight, len(hot), len(cold))
		if *mixedRequests > 0 {
			mixed.print(cfg.HTTP.CountsOwnInFlight)
		}
	}
	if r, ok := results["false after"]; ok {
		recordCounts("counts.anonymous", "anonymous GET /v1/counts", r)
	}
	if r, ok := results["true after"]; ok {
		recordCounts("counts.signed_in", "signed-in GET /v1/me/counts", r)
	}
	return nil
}

// sessionSides are the two sides of the read-after-write phase.
var sessionSides = []string{"no token", "Session-Token"}

// sessionResult is what the read-after-write phase measured, per side.
type sessionResult struct {
	sides map[string]readResult
	// checked and wrong count the reads of each side and those whose
	// client's own item did not show exactly the reaction just set.
	checked, wrong map[string]int
	examples       []string
	clients        int
}

// sessionReads is the read-after-write phase: *sessionClients clients, each
// in turn setting its reaction on an item of its own (solo-<i>, which no
// one else touches) and reading GET /v1/me/counts of that item and 49
// others (10 hot, 39 cold) from the deployed setting ("after"), with the
// write's Session-Token or without; only the read is timed. Each read must
// show the client's item exactly as just set (its reaction, and likes and
// dislikes 1 or 0): read-your-own-writes. The sides take turns in rounds, as
// the settings do.
func sessionReads(ctx context.Context, s *stack, client *http.Client, api string, hot, cold []string, store *countingStore) (sessionResult, error) {
	fmt.Fprintf(os.Stderr, "bench: counts reads right after the caller's write, %d clients…\n", *sessionClients)
	tokens := make([]string, *sessionClients)
	for i := range tokens {
		var err error
		if tokens[i], err = s.token(fmt.Sprintf("session-%d", i), false); err != nil {
			return sessionResult{}, err
		}
	}
	res := sessionResult{sides: map[string]readResult{}, checked: map[string]int{}, wrong: map[string]int{}, clients: len(tokens)}
	rounds := newSettingRounds()
	var mu sync.Mutex
	for round := 0; round < *countsRounds; round++ {
		for i := range sessionSides {
			side := sessionSides[(round+i)%len(sessionSides)]
			withToken := side == "Session-Token"
			run := func(n int) (phase, error) {
				p, _, err := afterWrites(client, api, api+"/after", "solo", tokens, n,
					func(int) bool { return withToken }, func(int) string { return side }, hot, cold, store, &res, &mu)
				return p, err
			}
			// A warm-up (its reads are checked too), then the measured share.
			if _, err := run(*sessionRequests / 5 / *countsRounds); err != nil {
				return res, err
			}
			lead0, err := benchstack.SpannerClockLead(ctx, s.DB)
			if err != nil {
				return res, err
			}
			p, err := run(*sessionRequests / *countsRounds)
			if err != nil {
				return res, err
			}
			lead1, err := benchstack.SpannerClockLead(ctx, s.DB)
			if err != nil {
				return res, err
			}
			rounds.add(side, p, lead0, lead1)
		}
	}
	for _, side := range sessionSides {
		res.sides[side] = rounds.result(side)
	}
	return res, nil
}

// afterWrites is one run of n reads right after the caller's own write
// (sessionReads): each of len(tokens) clients in turn sets its reaction on
// an item of its own (<item>-<c>, which no other client touches), through
// api, and reads GET /v1/me/counts of it and 49 others (10 hot, 39 cold)
// from the Counts handler at counts, with the write's Session-Token when
// token(c); only the read is timed. Each read must show the client's item
// exactly as just set; res counts the checks and the wrong reads by
// side(c), under mu. It returns the run's phase, all its reads, and their
// latencies by side.
func afterWrites(client *http.Client, api, counts, item string, tokens []string, n int, token func(c int) bool, side func(c int) string,
	hot, cold []string, store *countingStore, res *sessionResult, mu *sync.Mutex) (phase, map[string][]time.Duration, error) {
	var next, fails atomic.Int64
	lats := make([][]time.Duration, len(tokens))
	errs := make([]error, len(tokens))
	q0, wire0 := store.queries.Load(), otelcount.Global().Spanner().Reads
	t0 := storeTimings(store)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range tokens {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			own := fmt.Sprintf("%s-%d", item, c)
			kinds := []string{"like", "dislike", "none"}
			ids := make([]string, 0, 50)
			for k := 0; next.Add(1) <= int64(n); k++ {
				kind := kinds[rnd.IntN(len(kinds))]
				code, h, b, err := doHeader(client, "PUT", api+"/v1/reactions/"+own, tokens[c], `{"reaction":"`+kind+`"}`)
				if err == nil && code != 200 {
					err = fmt.Errorf("PUT status %d: %s", code, b)
				}
				if err != nil {
					fails.Add(1)
					errs[c] = cmp.Or(errs[c], err)
					continue
				}
				var hdr []string
				if token(c) {
					hdr = []string{session.Header, h.Get(session.Header)}
				}
				ids = append(append(ids[:0], own), pick(rnd, hot, 10)...)
				ids = append(ids, pick(rnd, cold, 39)...)
				t0 := time.Now()
				code, b, err = do(client, "GET", counts+"/v1/me/counts?ids="+strings.Join(ids, ","), tokens[c], "", hdr...)
				lat := time.Since(t0)
				if err == nil && code != 200 {
					err = fmt.Errorf("GET status %d: %s", code, b)
				}
				if err != nil {
					fails.Add(1)
					errs[c] = cmp.Or(errs[c], err)
					continue
				}
				lats[c] = append(lats[c], lat)
				var body countsfn.Body
				if err := json.Unmarshal(b, &body); err != nil {
					fails.Add(1)
					errs[c] = cmp.Or(errs[c], fmt.Errorf("GET answer %s: %w", b, err))
					continue
				}
				want := counter.Values{}
				switch kind {
				case "like":
					want.Likes = 1
				case "dislike":
					want.Dislikes = 1
				}
				got := body.Counts[own]
				mu.Lock()
				res.checked[side(c)]++
				if got.Likes != want.Likes || got.Dislikes != want.Dislikes || body.Viewer == nil || body.Viewer.Reactions[own].Reaction != kind {
					res.wrong[side(c)]++
					if len(res.examples) < 10 {
						var seen any = "none"
						if body.Viewer != nil {
							seen = body.Viewer.Reactions[own]
						}
						res.examples = append(res.examples, fmt.Sprintf("%s, %s right after %s: %d likes, %d dislikes, reaction %+v", side(c), own, kind, got.Likes, got.Dislikes, seen))
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil && fails.Load() > int64(n/10) {
		return phase{}, nil, fmt.Errorf("read after write: %d of %d failed: %w", fails.Load(), n, err)
	}
	p := phase{elapsed: time.Since(start), failed: int(fails.Load()), queries: store.queries.Load() - q0, readRPC: otelcount.Global().Spanner().Reads - wire0}
	p.timings(store, t0)
	bySide := map[string][]time.Duration{}
	for c, l := range lats {
		p.lats = append(p.lats, l...)
		bySide[side(c)] = append(bySide[side(c)], l...)
	}
	return p, bySide, nil
}

// print writes the read-after-write table.
func (r sessionResult) print(inFlight, hot, cold int) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	fmt.Printf("\nSigned-in reads right after the caller's own write: %d clients, each PUT on its own item then GET /v1/me/counts of it\nand 49 others (10 of %d hot, 39 of %d cold), the deployed setting (%d reads in flight); only the GET timed\n\n", r.clients, hot, cold, inFlight)
	fmt.Printf("%-44s %24s %24s\n", "", sessionSides[0], sessionSides[1])
	row := func(label string, f func(side string) string) {
		fmt.Printf("%-44s %24s %24s\n", label, f(sessionSides[0]), f(sessionSides[1]))
	}
	row("GET /v1/me/counts after a write: p50 / p99", func(s string) string { return ms(r.sides[s].p50) + " / " + ms(r.sides[s].p99) })
	row("   read-your-own-writes: wrong / checked", func(s string) string { return fmt.Sprintf("%d / %d", r.wrong[s], r.checked[s]) })
	row("   store reads per 1,000", func(s string) string { return fmt.Sprintf("%.0f", r.sides[s].per1000) })
	row("   Spanner read calls per 1,000 (all, wire)", func(s string) string { return fmt.Sprintf("%.0f", r.sides[s].wire1000) })
	row("   reads/s (each after a write)", func(s string) string { return fmt.Sprintf("%.0f", r.sides[s].perSec) })
	row("   mean read: in the client", func(s string) string { return ms(r.sides[s].meanClient) })
	row("      HTTP and scheduling (client - handler)", func(s string) string { return ms(r.sides[s].meanClient - r.sides[s].meanHandler) })
	row("      handler: verifying the token", func(s string) string { return ms(r.sides[s].meanAuth) })
	row("      handler: queued for a batch", func(s string) string { return ms(r.sides[s].meanQueue) })
	row("      handler: its batch's store read (OwnMany)", func(s string) string { return ms(r.sides[s].meanOwn) })
	row("      handler: the rest (cache, encoding)", func(s string) string {
		return ms(r.sides[s].meanHandler - r.sides[s].meanAuth - r.sides[s].meanQueue - r.sides[s].meanOwn)
	})
	row("   failed requests", func(s string) string { return fmt.Sprint(r.sides[s].failed) })
	row("   emulator clock lead, first → last round", func(s string) string { return ms(r.sides[s].lead0) + " → " + ms(r.sides[s].lead1) })
	for _, e := range r.examples {
		fmt.Println("   wrong: " + e)
	}
}

// mixedBaseline is the mixed phase's baseline setting: signed-in requests
// with a Session-Token and without read in one batch (oneBatchStore), so a
// batch that holds one without reads strongly, the tokened ones too.
const mixedBaseline = "one batch"

// mixedSettings are the mixed phase's settings: the baseline, and the
// deployed handler ("after"), which batches the two kinds apart.
var mixedSettings = []string{mixedBaseline, "after"}

// oneBatchStore reads every OwnMany query through one batcher, whatever
// the queries carry: the baseline of the mixed phase, under a handler that
// reads each request alone (OwnInFlight 0).
type oneBatchStore struct {
	*countingStore
	own *batch.Batcher[countstore.OwnQuery, countstore.Own]
}

func (o *oneBatchStore) OwnMany(ctx context.Context, qs []countstore.OwnQuery) ([]countstore.Own, error) {
	out := make([]countstore.Own, len(qs))
	for i, q := range qs {
		var err error
		if out[i], err = o.own.Do(ctx, q); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// The halves of the mixed phase's clients.
const (
	withTokenHalf    = "Session-Token"
	withoutTokenHalf = "no token"
)

// mixedResult is what the mixed phase measured, per setting.
type mixedResult struct {
	all map[string]readResult
	// p50 and p99 by setting and half (key setting+"/"+half).
	p50, p99 map[string]time.Duration
	// reads by setting and half, and by setting the measured batches read
	// strongly and the tokened reads among them.
	reads                               map[string]int
	batches, strongBatches, tokenStrong map[string]int64
	checks                              sessionResult
}

// mixedReads is the mixed phase: the read-after-write clients
// (sessionReads) at once, the even ones with their write's Session-Token
// and the odd ones without, against each of mixedSettings in turn, in
// rounds, as the settings of the other phases take turns.
func mixedReads(ctx context.Context, s *stack, client *http.Client, api string, hot, cold []string, stores map[string]*countingStore) (mixedResult, error) {
	fmt.Fprintf(os.Stderr, "bench: counts reads right after the caller's write, %d clients, half with the token…\n", *sessionClients)
	tokens := make([]string, *sessionClients)
	for i := range tokens {
		var err error
		if tokens[i], err = s.token(fmt.Sprintf("mixed-%d", i), false); err != nil {
			return mixedResult{}, err
		}
	}
	res := mixedResult{all: map[string]readResult{}, p50: map[string]time.Duration{}, p99: map[string]time.Duration{},
		reads: map[string]int{}, batches: map[string]int64{}, strongBatches: map[string]int64{}, tokenStrong: map[string]int64{},
		checks: sessionResult{checked: map[string]int{}, wrong: map[string]int{}, clients: len(tokens)}}
	rounds := newSettingRounds()
	lats := map[string][]time.Duration{}
	token := func(c int) bool { return c%2 == 0 }
	var mu sync.Mutex
	for round := 0; round < *countsRounds; round++ {
		for i := range mixedSettings {
			name := mixedSettings[(round+i)%len(mixedSettings)]
			store := stores[name]
			side := func(c int) string {
				if token(c) {
					return name + "/" + withTokenHalf
				}
				return name + "/" + withoutTokenHalf
			}
			counts := api + "/" + slug(name)
			// A warm-up (its reads are checked too), then the measured share.
			if _, _, err := afterWrites(client, api, counts, "mixed-solo", tokens, *mixedRequests/5 / *countsRounds, token, side, hot, cold, store, &res.checks, &mu); err != nil {
				return res, err
			}
			lead0, err := benchstack.SpannerClockLead(ctx, s.DB)
			if err != nil {
				return res, err
			}
			batches0, strong0, tokenStrong0 := store.batches.Load(), store.strongBatches.Load(), store.tokensReadStrongly.Load()
			p, bySide, err := afterWrites(client, api, counts, "mixed-solo", tokens, *mixedRequests / *countsRounds, token, side, hot, cold, store, &res.checks, &mu)
			if err != nil {
				return res, err
			}
			res.batches[name] += store.batches.Load() - batches0
			res.strongBatches[name] += store.strongBatches.Load() - strong0
			res.tokenStrong[name] += store.tokensReadStrongly.Load() - tokenStrong0
			lead1, err := benchstack.SpannerClockLead(ctx, s.DB)
			if err != nil {
				return res, err
			}
			rounds.add(name, p, lead0, lead1)
			for k, l := range bySide {
				lats[k] = append(lats[k], l...)
			}
		}
	}
	for _, name := range mixedSettings {
		res.all[name] = rounds.result(name)
	}
	for k, l := range lats {
		res.p50[k], res.p99[k] = benchstack.Percentiles(l)
		res.reads[k] = len(l)
	}
	return res, nil
}

// print writes the mixed phase's table.
func (r mixedResult) print(inFlight int) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	labels := map[string]string{mixedBaseline: "one batch (before)", "after": "kinds apart (after)"}
	fmt.Printf("\nSigned-in reads right after the caller's own write, mixed: %d clients at once, half with the write's Session-Token\nand half without, as the phase above (%d reads in flight); only the GET timed\n\n", r.checks.clients, inFlight)
	fmt.Printf("%-50s", "")
	for _, name := range mixedSettings {
		fmt.Printf(" %24s", labels[name])
	}
	fmt.Println()
	row := func(label string, f func(name string) string) {
		fmt.Printf("%-50s", label)
		for _, name := range mixedSettings {
			fmt.Printf(" %24s", f(name))
		}
		fmt.Println()
	}
	for _, half := range []string{withTokenHalf, withoutTokenHalf} {
		row(half+" half: p50 / p99", func(n string) string { return ms(r.p50[n+"/"+half]) + " / " + ms(r.p99[n+"/"+half]) })
		row("   read-your-own-writes: wrong / checked", func(n string) string {
			return fmt.Sprintf("%d / %d", r.checks.wrong[n+"/"+half], r.checks.checked[n+"/"+half])
		})
	}
	per1000 := func(n int64, of int) string {
		if of == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(n)*1000/float64(of))
	}
	reads := func(n string) int { return r.reads[n+"/"+withTokenHalf] + r.reads[n+"/"+withoutTokenHalf] }
	row("batches (OwnMany calls) per 1,000 reads", func(n string) string { return per1000(r.batches[n], reads(n)) })
	row("   of them strong", func(n string) string { return per1000(r.strongBatches[n], reads(n)) })
	row("token reads read strongly, per 1,000", func(n string) string { return per1000(r.tokenStrong[n], r.reads[n+"/"+withTokenHalf]) })
	row("mean read: queued for a batch", func(n string) string { return ms(r.all[n].meanQueue) })
	row("   its batch's store read (OwnMany)", func(n string) string { return ms(r.all[n].meanOwn) })
	row("Spanner read calls per 1,000 (all, wire)", func(n string) string { return fmt.Sprintf("%.0f", r.all[n].wire1000) })
	row("reads/s (each after a write)", func(n string) string { return fmt.Sprintf("%.0f", r.all[n].perSec) })
	row("failed requests", func(n string) string { return fmt.Sprint(r.all[n].failed) })
	row("emulator clock lead, first → last round", func(n string) string { return ms(r.all[n].lead0) + " → " + ms(r.all[n].lead1) })
	for _, e := range r.checks.examples {
		fmt.Println("   wrong: " + e)
	}
}

// recordCounts notes the deployed setting's figures of one kind of read
// for -costs.
func recordCounts(prefix, what string, r readResult) {
	record(prefix+".cpu_us", float64(r.cpu.Microseconds()), "µs", "process CPU per "+what+" of 50 ids: Counts and the benchmark's own readers and writers in one process (an upper bound)")
	record(prefix+".spanner_reads_per_1000", r.wire1000, "calls", "Spanner read calls per 1,000 "+what+" (all the process made: refreshes, writers)")
	record(prefix+".reads_per_s", r.perSec, "reads/s", what+" per second from the concurrent readers")
	record(prefix+".readers", float64(*countsReaders), "clients", "concurrent readers")
}

// seedCounts gives every id some counts, counted and folded, as an
// established video has.
func seedCounts(ctx context.Context, s *stack, ids []string) error {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(ids); i += 500 {
		var deltas []counter.Delta
		for _, id := range ids[i:min(i+500, len(ids))] {
			deltas = append(deltas, counter.Deltas(id, counter.Values{Likes: rnd.Int64N(1000) + 1, Comments: rnd.Int64N(50), Views: rnd.Int64N(100000) + 1})...)
		}
		if _, err := s.Outbox.Apply(ctx, []events.Event{{ID: fmt.Sprintf("seed-%d", i), Kind: events.KindCounterDelta, Deltas: deltas}}); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	for {
		st, err := s.Folds.Fold(ctx)
		if err != nil {
			return fmt.Errorf("seed fold: %w", err)
		}
		if st.Shards == 0 {
			return nil
		}
	}
}

// countsRound is one setting's turn in a round: a warm-up (connections,
// and the instance cache, whose ids aged out while the other settings had
// their turns), then its share of the measured requests, with the
// emulator's clock lead before and after.
func countsRound(ctx context.Context, s *stack, client *http.Client, path string, tokens []string, signed bool, hot, cold []string, store *countingStore) (p phase, lead0, lead1 time.Duration, err error) {
	if _, err = readPhase(client, path, tokens, signed, hot, cold, *countsRequests/5 / *countsRounds, store); err != nil {
		return
	}
	if lead0, err = benchstack.SpannerClockLead(ctx, s.DB); err != nil {
		return
	}
	if p, err = readPhase(client, path, tokens, signed, hot, cold, *countsRequests / *countsRounds, store); err != nil {
		return
	}
	lead1, err = benchstack.SpannerClockLead(ctx, s.DB)
	return
}

// phase is what one run of readPhase measured.
type phase struct {
	lats             []time.Duration
	elapsed          time.Duration
	failed           int
	queries, readRPC int64
	cpu              time.Duration
	// The countingStore's timings over the phase.
	handlerNanos, handled, ownNanos, ownQueries int64
	authNanos, queueNanos, queued               int64
}

// timings adds store's timings since before to p.
func (p *phase) timings(store *countingStore, before phase) {
	p.handlerNanos = store.handlerNanos.Load() - before.handlerNanos
	p.handled = store.handled.Load() - before.handled
	p.ownNanos = store.ownNanos.Load() - before.ownNanos
	p.ownQueries = store.ownQueries.Load() - before.ownQueries
	p.authNanos = store.authNanos.Load() - before.authNanos
	p.queueNanos = store.queueNanos.Load() - before.queueNanos
	p.queued = store.queued.Load() - before.queued
}

// storeTimings is store's timings so far, to subtract (phase.timings).
func storeTimings(store *countingStore) phase {
	return phase{handlerNanos: store.handlerNanos.Load(), handled: store.handled.Load(), ownNanos: store.ownNanos.Load(), ownQueries: store.ownQueries.Load(),
		authNanos: store.authNanos.Load(), queueNanos: store.queueNanos.Load(), queued: store.queued.Load()}
}

// settingRounds gathers each setting's measured rounds, and the emulator's
// clock lead before its first round and after its last.
type settingRounds struct {
	rounds map[string][]phase
	leads  map[string][2]time.Duration
}

func newSettingRounds() *settingRounds {
	return &settingRounds{rounds: map[string][]phase{}, leads: map[string][2]time.Duration{}}
}

// add records a round of the setting name, measured between the leads
// lead0 and lead1.
func (s *settingRounds) add(name string, p phase, lead0, lead1 time.Duration) {
	l, seen := s.leads[name]
	if !seen {
		l[0] = lead0
	}
	l[1] = lead1
	s.leads[name] = l
	s.rounds[name] = append(s.rounds[name], p)
}

// result is the setting's rounds merged, with its leads.
func (s *settingRounds) result(name string) readResult {
	r := merged(s.rounds[name])
	r.lead0, r.lead1 = s.leads[name][0], s.leads[name][1]
	return r
}

// merged folds the rounds of one setting into its figures.
func merged(rounds []phase) readResult {
	var all []time.Duration
	var elapsed time.Duration
	var r readResult
	var queries, rpcs int64
	var cpu time.Duration
	var handlerNanos, handled, ownNanos, ownQueries, clientNanos int64
	var authNanos, queueNanos, queued int64
	for _, p := range rounds {
		handlerNanos, handled, ownNanos, ownQueries = handlerNanos+p.handlerNanos, handled+p.handled, ownNanos+p.ownNanos, ownQueries+p.ownQueries
		authNanos, queueNanos, queued = authNanos+p.authNanos, queueNanos+p.queueNanos, queued+p.queued
		for _, l := range p.lats {
			clientNanos += int64(l)
		}
		cpu += p.cpu
		all = append(all, p.lats...)
		elapsed += p.elapsed
		r.failed += p.failed
		queries += p.queries
		rpcs += p.readRPC
	}
	if len(all) == 0 {
		return r
	}
	r.perSec = float64(len(all)) / elapsed.Seconds()
	r.p50, r.p99 = benchstack.Percentiles(all)
	r.per1000 = float64(queries) * 1000 / float64(len(all))
	r.wire1000 = float64(rpcs) * 1000 / float64(len(all))
	r.cpu = cpu / time.Duration(len(all))
	r.meanClient = time.Duration(clientNanos / int64(len(all)))
	if handled > 0 {
		r.meanHandler = time.Duration(handlerNanos / handled)
		r.meanAuth = time.Duration(authNanos / handled)
	}
	if queued > 0 {
		r.meanQueue = time.Duration(queueNanos / queued)
	}
	if ownQueries > 0 {
		r.meanOwn = time.Duration(ownNanos / ownQueries)
	}
	return r
}

// readPhase runs n requests of 50 ids (10 hot, 40 cold, drawn at random) on
// path from len(tokens) concurrent readers, signed in as reader i or
// anonymous, and counts store's reads.
func readPhase(client *http.Client, path string, tokens []string, signed bool, hot, cold []string, n int, store *countingStore) (phase, error) {
	var next, fails atomic.Int64
	lats := make([][]time.Duration, len(tokens))
	errs := make([]error, len(tokens))
	q0 := store.queries.Load()
	wire0 := otelcount.Global().Spanner().Reads
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			tok := ""
			if signed {
				tok = tokens[i]
			}
			ids := make([]string, 0, 50)
			for next.Add(1) <= int64(n) {
				ids = append(ids[:0], pick(rnd, hot, 10)...)
				ids = append(ids, pick(rnd, cold, 40)...)
				// In canonical order: any other is answered with a redirect to it.
				slices.Sort(ids)
				t0 := time.Now()
				code, b, err := do(client, "GET", path+strings.Join(ids, ","), tok, "")
				if err == nil && code != 200 {
					err = fmt.Errorf("status %d: %s", code, b)
				}
				if err != nil {
					// A 503 under overload is a figure, not the end of the run.
					fails.Add(1)
					if errs[i] == nil {
						errs[i] = err
					}
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil && fails.Load() > int64(n/10) {
		return phase{}, fmt.Errorf("counts reads: %d of %d failed: %w", fails.Load(), n, err)
	}
	p := phase{elapsed: time.Since(start), failed: int(fails.Load()), queries: store.queries.Load() - q0, readRPC: otelcount.Global().Spanner().Reads - wire0, cpu: processCPU() - cpu0}
	for _, l := range lats {
		p.lats = append(p.lats, l...)
	}
	return p, nil
}

// pick returns k distinct elements of from.
func pick(rnd *rand.Rand, from []string, k int) []string {
	k = min(k, len(from))
	seen := make(map[int]bool, k)
	out := make([]string, 0, k)
	for len(out) < k {
		i := rnd.IntN(len(from))
		if !seen[i] {
			seen[i] = true
			out = append(out, from[i])
		}
	}
	return out
}

// publicFreshness: an id already read (so held by the instance, when it
// holds any) is liked; the time until the public counts show it.
func publicFreshness(client *http.Client, counts, api string, s *stack, name string) (p50, p99 time.Duration, err error) {
	const samples = 20
	var lat []time.Duration
	for i := range samples {
		id := fmt.Sprintf("fresh-%s-%d", name, i)
		if code, b, err := do(client, "GET", counts+"/v1/counts?ids="+id, "", ""); err != nil || code != 200 {
			return 0, 0, fmt.Errorf("freshness read: %d %s %v", code, b, err)
		}
		tok, err := s.token("fresh-"+name, false)
		if err != nil {
			return 0, 0, err
		}
		if code, b, err := do(client, "PUT", api+"/v1/reactions/"+id, tok, `{"reaction":"like"}`); err != nil || code != 200 {
			return 0, 0, fmt.Errorf("freshness write: %d %s %v", code, b, err)
		}
		accepted := time.Now()
		for {
			_, b, err := do(client, "GET", counts+"/v1/counts?ids="+id, "", "")
			if err != nil {
				return 0, 0, err
			}
			if strings.Contains(string(b), `"likes":1`) {
				lat = append(lat, time.Since(accepted))
				break
			}
			if time.Since(accepted) > 30*time.Second {
				return 0, 0, errors.New("freshness: a like not visible after 30 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	p50, p99 = benchstack.Percentiles(lat)
	return p50, p99, nil
}

// slug is a setting's name as a path segment.
func slug(name string) string { return strings.ReplaceAll(name, " ", "-") }
