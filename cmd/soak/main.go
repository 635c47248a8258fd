// Command soak runs a bounded mixed load on the local stack (the cmd/local
// program that `make run` starts, on emulators of its own) with faults on a
// schedule — each emulator in turn (Spanner, Bigtable, Pub/Sub) frozen with
// SIGSTOP for a few seconds — then lets the pipeline settle by itself and
// prints what it served and what it ended with: requests, errors by status,
// latencies, the drift of every counter against its source of truth and the
// history rows lost. It exits 1 when a counter drifted, a history row was
// lost or wrong, a write was never accepted, or an answer broke the spec (a
// 5xx other than 503, a 503 without Retry-After, one past the deadline).
//
//	go run ./cmd/soak -duration 10m
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/sethvargo/go-envconfig"

	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/cmd/soak/faults"
	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/spannerdb"
)

type options struct {
	duration, settle           time.Duration
	faultEvery, faultFor       time.Duration
	reactors, watchers         int
	commenters, readers, keys  int
	pace                       time.Duration
	keepLogs, readReplies      bool
	requestTimeout, relayAfter string
}

func main() {
	ctx, stop := cmdmain.Context()
	defer stop()
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the load runs")
	flag.DurationVar(&o.settle, "settle", 5*time.Minute, "how long the pipeline may take to converge after the load")
	flag.DurationVar(&o.faultEvery, "fault-every", time.Minute, "time between the starts of two faults (0: no faults)")
	flag.DurationVar(&o.faultFor, "fault-for", 12*time.Second, "how long each fault lasts (longer than -request-timeout: requests time out)")
	flag.IntVar(&o.reactors, "reactors", 6, "users setting reactions")
	flag.IntVar(&o.watchers, "watchers", 6, "users recording, deleting and clearing watches")
	flag.IntVar(&o.commenters, "commenters", 4, "users posting and deleting comments (plus a spammer and a moderator)")
	flag.IntVar(&o.readers, "readers", 4, "users reading counts, histories and listings")
	flag.IntVar(&o.keys, "videos", 20, "videos the load is spread over")
	flag.DurationVar(&o.pace, "pace", 100*time.Millisecond, "pause between one user's operations")
	flag.BoolVar(&o.keepLogs, "keep-logs", false, "keep the logs of a run that passed")
	flag.BoolVar(&o.readReplies, "read-replies", true, "readers read reply listings too")
	flag.StringVar(&o.requestTimeout, "request-timeout", "10s", "REQUEST_TIMEOUT of the stack")
	flag.StringVar(&o.relayAfter, "relay-after", "2m", "COUNTER_RELAY_AFTER of the stack")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// run returns 1 when the figures say the system failed its guarantees.
func run(ctx context.Context, o options) (code int, err error) {
	logDir, err := os.MkdirTemp("", "engagement-soak-")
	if err != nil {
		return 0, err
	}
	defer func() {
		if code == 0 && err == nil && !o.keepLogs {
			os.RemoveAll(logDir)
		} else {
			say("logs kept in %s", logDir)
		}
	}()

	say("starting the emulators (logs in %s)", logDir)
	stack, err := emulators.Start(ctx, emulators.Options{LogDir: logDir})
	if err != nil {
		return 0, err
	}
	defer stack.Stop()
	for k, v := range stack.Env() {
		os.Setenv(k, v)
	}

	// One viewing window holds the run, so that the load's model knows
	// which watches count as views.
	viewWindow := workload.ViewWindowFor(time.Now(), max(6*time.Hour, 8*o.duration))
	os.Setenv("VIEW_WINDOW", viewWindow.String())
	local, base, err := startLocal(ctx, stack, logDir, o)
	if err != nil {
		return 0, err
	}
	defer local.stop()
	api := workload.NewClient(base)
	tokens := func(uid string, moderator bool) (string, error) { return devToken(api, uid, moderator) }

	project := "soak"
	cfg, err := config.FromLookuper(ctx, envconfig.MapLookuper(map[string]string{"GOOGLE_CLOUD_PROJECT": project, emulators.EnvSpanner: stack.Hosts.Spanner}))
	if err != nil {
		return 0, err
	}
	sc, err := spanner.NewClientWithConfig(ctx, cfg.DatabasePath(), spanner.ClientConfig{DisableNativeMetrics: true})
	if err != nil {
		return 0, err
	}
	defer sc.Close()
	db := spannerdb.Wrap(sc, cfg)
	counters := countstore.New(db)

	spec := workload.Spec{
		Reactors: o.reactors, Watchers: o.watchers, Commenters: o.commenters, Readers: o.readers,
		Pace: o.pace, HistoryDeletes: true, ReadListings: true, ReadReplies: o.readReplies, OwnReads: true,
		ViewWindow: viewWindow,
	}
	for i := range o.keys {
		spec.Keys = append(spec.Keys, fmt.Sprintf("video-%d", i))
	}
	if code, _, _ := api.Do(nil, "", "GET", "/v1/videos/video-0/comments", "", ""); code == http.StatusNotFound {
		say("comments are not served by this build: the load has none")
		spec.Commenters = 0
	}

	say("load: %d reactors, %d watchers, %d commenters (+ a spammer and a moderator), %d readers on %d videos for %v",
		spec.Reactors, spec.Watchers, spec.Commenters, spec.Readers, len(spec.Keys), o.duration)
	load, err := workload.Start(api, tokens, spec)
	if err != nil {
		return 0, err
	}
	started := time.Now()
	outages := injectFaults(ctx, stack, o)
	select {
	case <-ctx.Done():
	case <-time.After(o.duration):
	}
	windows := outages()
	loadErrs := load.Stop()
	loadTime := time.Since(started)
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	say("load stopped after %v; %d writes accepted; settling (pipeline alone, no reconciliation)", loadTime.Round(time.Second), load.Model.Accepted())

	m := load.Model
	settled, counted, pending := waitSettled(ctx, api, counters, m, o.settle)
	hdiffs := workload.CheckHistories(api, m)
	truth, terr := retry(ctx, func() (map[string]counter.Values, error) { return workload.Truth(ctx, db, m.Keys()) })
	countDiffs, cerr := workload.CheckCounts(api, m)
	reactionDiffs := workload.CheckReactions(api, m)
	commentDiffs, listed, failedListings := workload.CheckComments(api, m)
	rep, rerr := reconcile(api)

	// ---- the figures
	samples := load.Rec.Samples()
	fmt.Println()
	fmt.Printf("SOAK %v of load on the local stack", loadTime.Round(time.Second))
	if o.faultEvery > 0 {
		fmt.Printf(", an emulator frozen for %v every %v (Spanner, Bigtable, Pub/Sub in turn)", o.faultFor, o.faultEvery)
	}
	fmt.Println()
	printRequests(samples, loadTime)
	printFaults(samples, windows)
	violations := workload.Violations(samples, parseDuration(o.requestTimeout), 2500*time.Millisecond)
	fmt.Printf("answers that break the spec (a 5xx but 503, a 503 without Retry-After, past the %s deadline, no answer): %d\n", o.requestTimeout, len(violations))
	for _, v := range first(violations, 15) {
		fmt.Println("    " + v)
	}
	fmt.Printf("writes accepted: %d; never accepted: %d\n", m.Accepted(), len(loadErrs))
	for _, e := range first(loadErrs, 10) {
		fmt.Println("    " + e.Error())
	}
	if settled > 0 {
		fmt.Printf("pipeline settled %v after the load (no reconciliation)\n", settled.Round(time.Second))
	} else {
		fmt.Printf("pipeline NOT settled %v after the load\n", o.settle)
	}

	want := m.Counts()
	keys := m.Keys()
	fields := workload.TruthFields()
	var drift, driftTruth, driftAccepted []string
	var pendingLeft int64
	for _, k := range keys {
		c := counted[k]
		if terr == nil {
			// Against the sources of truth: the reactions and comments in
			// Spanner; views against the recorded watches.
			t := truth[k].Only(fields)
			t.Views = want[k].Views
			if d := c.Minus(t); !d.IsZero() {
				driftTruth = append(driftTruth, fmt.Sprintf("%s: counted %+v, truth %+v", k, c, t))
			}
			if d := t.Only(fields).Minus(want[k].Only(fields)); !d.IsZero() {
				driftAccepted = append(driftAccepted, fmt.Sprintf("%s: Spanner holds %+v, the API accepted %+v", k, t.Only(fields), want[k].Only(fields)))
			}
		}
		if c != want[k] {
			drift = append(drift, fmt.Sprintf("%s: counted %+v, accepted %+v", k, c, want[k]))
		}
		p := pending[k]
		pendingLeft += abs(p.Likes) + abs(p.Dislikes) + abs(p.Comments) + abs(p.Replies) + abs(p.Views)
	}
	if terr != nil {
		fmt.Printf("counter drift against the sources of truth: UNKNOWN (%v)\n", terr)
	} else {
		fmt.Printf("counter drift against the sources of truth (likes, dislikes, comments, replies in Spanner; views: recorded watches): %d of %d counters\n", len(driftTruth), len(keys))
		for _, d := range first(driftTruth, 10) {
			fmt.Println("    " + d)
		}
		fmt.Printf("accepted changes missing from (or extra in) the sources of truth: %d counters\n", len(driftAccepted))
		for _, d := range first(driftAccepted, 10) {
			fmt.Println("    " + d)
		}
	}
	fmt.Printf("counters that differ from the writes accepted: %d; pending deltas left: %d\n", len(drift), pendingLeft)
	for _, d := range first(drift, 10) {
		fmt.Println("    " + d)
	}
	if cerr != nil {
		countDiffs = append(countDiffs, cerr.Error())
	}
	fmt.Printf("GET /v1/counts differing from the writes accepted: %d; GET /v1/reactions or /v1/me/counts differing: %d\n", len(countDiffs), len(reactionDiffs))
	for _, d := range first(append(countDiffs, reactionDiffs...), 10) {
		fmt.Println("    " + d)
	}
	own := load.Own()
	fmt.Printf("read-your-own-writes during the load (GET /v1/me/counts with the Session-Token of a reactor's PUT on its own item, right after it): %d read, %d not exactly the reaction set\n", own.Checked, len(own.Wrong))
	for _, d := range first(own.Wrong, 10) {
		fmt.Println("    " + d)
	}

	expected, lost, wrong, unexpected := 0, 0, 0, 0
	for _, es := range m.History() {
		expected += len(es)
	}
	for _, d := range hdiffs {
		lost += len(d.Missing)
		wrong += len(d.Wrong)
		unexpected += len(d.Unexpected)
		if d.Order {
			wrong++
		}
	}
	fmt.Printf("history rows lost: %d of %d expected entries (%d watches recorded); wrong: %d; deleted but shown: %d\n",
		lost, expected, m.Watches(), wrong, unexpected)
	for _, u := range first(slices.Sorted(maps.Keys(hdiffs)), 10) {
		fmt.Printf("    %s: %s\n", u, hdiffs[u])
	}
	if spec.Commenters > 0 {
		fmt.Printf("comments listed: %d; listings differing from the writes accepted: %d; listing reads that failed before one answered: %d\n",
			listed, len(commentDiffs), failedListings)
		for _, d := range first(commentDiffs, 10) {
			fmt.Println("    " + d)
		}
	}
	if rerr != nil {
		fmt.Printf("reconciliation afterwards: FAILED (%v)\n", rerr)
	} else {
		fmt.Printf("reconciliation afterwards: %d counters checked, %d corrected\n", rep.Checked, rep.Corrected)
	}

	failed := terr != nil || rerr != nil || settled == 0 || len(driftTruth) > 0 || len(driftAccepted) > 0 || len(drift) > 0 ||
		pendingLeft > 0 || lost > 0 || wrong > 0 || unexpected > 0 || len(loadErrs) > 0 || len(countDiffs) > 0 ||
		len(reactionDiffs) > 0 || len(commentDiffs) > 0 || rep.Corrected > 0 || len(violations) > 0 ||
		len(own.Wrong) > 0 || (o.reactors > 0 && own.Checked == 0)
	if failed {
		fmt.Println("RESULT: FAIL")
		return 1, nil
	}
	fmt.Println("RESULT: PASS (no drift, no history row lost, every answer as the spec says)")
	return 0, nil
}

// ---- the local stack

type localStack struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startLocal builds cmd/local and runs it on the soak's emulators.
func startLocal(ctx context.Context, stack *emulators.Stack, logDir string, o options) (*localStack, string, error) {
	bin := filepath.Join(logDir, "local")
	say("building cmd/local")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/videngage/engagement/cmd/local")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, "", fmt.Errorf("build cmd/local: %w", err)
	}
	p, err := emulators.FreePort()
	if err != nil {
		return nil, "", err
	}
	port := strconv.Itoa(p)
	logf, err := os.Create(filepath.Join(logDir, "local.log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"PORT="+port,
		"GOOGLE_CLOUD_PROJECT=soak",
		"RATE_LIMITS=off",
		"TELEMETRY_EXPORTER=none",
		"REQUEST_TIMEOUT="+o.requestTimeout,
		"COUNTER_RELAY_AFTER="+o.relayAfter,
		"LOCAL_LOG_DIR="+logDir,
	)
	for k, v := range stack.Env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", err
	}
	l := &localStack{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(l.done)
	}()
	base := "http://127.0.0.1:" + port
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				say("local stack serving at %s (log: %s)", base, logf.Name())
				return l, base, nil
			}
		}
		select {
		case <-l.done:
			return nil, "", fmt.Errorf("cmd/local exited; see %s", logf.Name())
		case <-ctx.Done():
			l.stop()
			return nil, "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			l.stop()
			return nil, "", fmt.Errorf("cmd/local not healthy within 90 s; see %s", logf.Name())
		}
	}
}

func (l *localStack) stop() {
	l.cmd.Process.Signal(os.Interrupt)
	select {
	case <-l.done:
	case <-time.After(15 * time.Second):
		l.cmd.Process.Kill()
		<-l.done
	}
}

// devToken mints a token with the stack's /dev/token.
func devToken(api *workload.Client, uid string, moderator bool) (string, error) {
	path := "/dev/token?uid=" + uid
	if moderator {
		path += "&moderator=true"
	}
	code, _, b := api.Do(nil, "", "GET", path, "", "")
	var v struct{ IDToken string }
	if code != 200 || json.Unmarshal(b, &v) != nil || v.IDToken == "" {
		return "", fmt.Errorf("GET %s: %d %s", path, code, b)
	}
	return v.IDToken, nil
}

// ---- faults

// window is one outage.
type window struct {
	emulator string
	from, to time.Time
}

// injectFaults freezes Spanner, Bigtable and Pub/Sub in turn, one every
// faultEvery (the first after half of it), each for faultFor. The returned
// function ends the schedule, continues a frozen emulator and returns the
// outages.
func injectFaults(ctx context.Context, stack *emulators.Stack, o options) func() []window {
	if o.faultEvery <= 0 {
		return func() []window { return nil }
	}
	order := []string{emulators.Spanner, emulators.Bigtable, emulators.PubSub}
	stop := make(chan struct{})
	var (
		mu      sync.Mutex
		windows []window
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		next := time.After(o.faultEvery / 2)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-next:
			}
			next = time.After(o.faultEvery)
			name := order[i%len(order)]
			thaw, err := faults.Freeze(stack, name, o.faultFor+time.Minute)
			if err != nil {
				say("fault: %v", err)
				continue
			}
			w := window{emulator: name, from: time.Now()}
			say("fault: %s emulator frozen for %v", name, o.faultFor)
			select {
			case <-stop:
			case <-ctx.Done():
			case <-time.After(o.faultFor):
			}
			if err := thaw(); err != nil {
				say("fault: %v", err)
			}
			w.to = time.Now()
			say("fault: %s emulator running again", name)
			mu.Lock()
			windows = append(windows, w)
			mu.Unlock()
		}
	})
	return func() []window {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(windows)
	}
}

// ---- settling and checks

// waitSettled waits until every counter equals the writes accepted with
// nothing pending and every history is as accepted, and returns how long
// that took (0: not within limit) and the last counted and pending values.
// It polls the API (anonymous counts are single-use reads, which do not get
// in the way of the stack's transactions) and reads Spanner to confirm.
func waitSettled(ctx context.Context, api *workload.Client, counters *countstore.Store, m *workload.Model, limit time.Duration) (time.Duration, map[string]counter.Values, map[string]counter.Values) {
	start := time.Now()
	want := m.Counts()
	keys := m.Keys()
	var counted, pending map[string]counter.Values
	lastReport := start
	for {
		diffs, err := workload.CheckCounts(api, m)
		if err == nil && len(diffs) == 0 && len(workload.CheckHistories(api, m)) == 0 {
			if c, p, err := totals(ctx, counters, keys); err == nil {
				counted, pending = c, p
				off := 0
				for _, k := range keys {
					if counted[k] != want[k] || !pending[k].IsZero() {
						off++
					}
				}
				if off == 0 {
					return time.Since(start), counted, pending
				}
			}
		}
		if time.Since(lastReport) > 30*time.Second {
			say("settling: %d of %d counters not there yet (%v) %s", len(diffs), len(keys), err, strings.Join(first(diffs, 3), "; "))
			lastReport = time.Now()
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			if c, p, err := totals(ctx, counters, keys); err == nil {
				counted, pending = c, p
			}
			return 0, counted, pending
		}
		time.Sleep(2 * time.Second)
	}
}

// totals reads counted and pending values of keys in chunks. The soak's
// read-only transactions overlap the stack's read-write ones, which the
// emulator refuses now and then: each chunk is tried a few times.
func totals(ctx context.Context, counters *countstore.Store, keys []string) (counted, pending map[string]counter.Values, err error) {
	counted, pending = map[string]counter.Values{}, map[string]counter.Values{}
	for chunk := range slices.Chunk(keys, 500) {
		var c, p map[string]counter.Values
		for attempt := 0; ; attempt++ {
			if c, p, err = counters.Totals(ctx, chunk); err == nil || attempt == 10 || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return nil, nil, err
		}
		maps.Copy(counted, c)
		maps.Copy(pending, p)
	}
	return counted, pending, nil
}

func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var v T
	var err error
	for range 10 {
		if v, err = f(); err == nil || ctx.Err() != nil {
			return v, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return v, err
}

// reconcile asks the stack to reconcile every counter now.
func reconcile(api *workload.Client) (reconcilestore.Report, error) {
	var rep reconcilestore.Report
	code, _, b := api.Do(nil, "", "POST", "/internal/reconcile", "", "")
	if code != 200 {
		return rep, fmt.Errorf("POST /internal/reconcile: %d %s", code, b)
	}
	return rep, json.Unmarshal(b, &rep)
}

// ---- printing

func printRequests(samples []workload.Sample, d time.Duration) {
	codes := map[int]int{}
	var lat []time.Duration
	for _, s := range samples {
		codes[s.Code]++
		lat = append(lat, s.Latency)
	}
	slices.Sort(lat)
	fmt.Printf("requests served: %d (%.0f/s)\n", len(samples), float64(len(samples))/d.Seconds())
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		name := fmt.Sprint(c)
		if c == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", name, codes[c]))
	}
	fmt.Printf("answers by status: %s\n", strings.Join(parts, ", "))
	fmt.Printf("latency: p50 %v, p99 %v, max %v\n", workload.Percentile(lat, 50), workload.Percentile(lat, 99), workload.Percentile(lat, 100))
	fmt.Println("by operation:")
	for _, part := range strings.Split(workload.Summary(samples), "; ") {
		fmt.Println("    " + part)
	}
}

func printFaults(samples []workload.Sample, windows []window) {
	if len(windows) == 0 {
		return
	}
	var total time.Duration
	byEmu := map[string]int{}
	for _, w := range windows {
		total += w.to.Sub(w.from)
		byEmu[w.emulator]++
	}
	n503 := 0
	var outside []string
	for _, s := range samples {
		if s.Code != http.StatusServiceUnavailable {
			continue
		}
		before := n503
		answered := s.At.Add(s.Latency)
		for _, w := range windows {
			// A request in flight when the emulator froze, or answered
			// within the request deadline after the thaw, belongs to the
			// outage.
			if answered.After(w.from) && s.At.Before(w.to.Add(10*time.Second)) {
				n503++
				break
			}
		}
		if n503 == before {
			outside = append(outside, fmt.Sprintf("%s at %s (%v)", s.Op, s.At.Format("15:04:05.000"), s.Latency.Round(time.Millisecond)))
		}
	}
	var parts []string
	for _, e := range slices.Sorted(maps.Keys(byEmu)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", e, byEmu[e]))
	}
	fmt.Printf("faults: %d outages (%s), %v frozen in all; 503 answers during or just after them: %d of %d\n",
		len(windows), strings.Join(parts, ", "), total.Round(time.Second), n503, workload.CountCode(samples, http.StatusServiceUnavailable))
	for _, o := range first(outside, 10) {
		fmt.Println("    503 outside an outage: " + o)
	}
}

func first[T any](xs []T, n int) []T {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

func parseDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 10 * time.Second
	}
	return d
}
