package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/cmd/internal/localstack"
	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/topology"
)

// envRegion, set in a region child, makes the test binary serve one
// region (localstack.ServeRegion) as `local -region <name>` does; its
// command line names the region.
const envRegion = "DRILLS_REGION_CHILD"

// envRegionsReport names the file the region drill writes its report to
// (docs/benchmarks/regions.md); unset, it writes none.
const envRegionsReport = "REGIONS_REPORT"

// runRegionChild is a region child: every function with its own scheduler,
// logging JSON lines to stderr (the drill's log file of the region).
func runRegionChild() int {
	fs := flag.NewFlagSet("region", flag.ContinueOnError)
	name := fs.String("region", "", "the region served")
	if err := fs.Parse(os.Args[1:]); err != nil || *name == "" {
		fmt.Fprintln(os.Stderr, "region child: -region <name> is required")
		return 2
	}
	slog.SetDefault(slog.New(httpx.NewLogHandler(os.Stderr, slog.LevelInfo, "")).With("region", *name))
	ctx, stop := cmdmain.Context()
	defer stop()
	if err := localstack.ServeRegion(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "region child:", err)
		return 1
	}
	return 0
}

// regionProcess is one region of a drill stack.
type regionProcess struct {
	name  string
	child *localstack.Child
	log   string
	// killed is when the drill killed it (zero: it runs).
	killed time.Time
}

// startRegions starts one child process per region, as `make run` with
// REGIONS=2 does, and the balancer in front of them.
func (st *drillStack) startRegions(names []string) {
	st.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		st.t.Fatal(err)
	}
	env := append(os.Environ(), envRegion+"=1")
	for k, v := range st.env {
		env = append(env, k+"="+v)
	}
	st.regions = make([]*regionProcess, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		r := &regionProcess{name: name, log: filepath.Join(logRoot, strings.ReplaceAll(st.t.Name(), "/", "_")+"-"+name+".log")}
		st.regions[i] = r
		wg.Go(func() {
			logf, err := os.Create(r.log)
			if err != nil {
				errs[i] = err
				return
			}
			defer logf.Close()
			cmd := exec.Command(exe, "-region", name)
			cmd.Env = env
			cmd.Stdout, cmd.Stderr = logf, logf
			if r.child, err = localstack.StartChild(cmd, 90*time.Second); err != nil {
				errs[i] = fmt.Errorf("region %s: %w; log:\n%s", name, err, tail(r.log, 40))
			}
		})
	}
	wg.Wait()
	st.t.Cleanup(func() {
		for _, r := range st.regions {
			if r.child != nil {
				r.child.Kill()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		st.t.Fatal(err)
	}
	var backends []localstack.Backend
	for _, r := range st.regions {
		backends = append(backends, localstack.Backend{Name: r.name, Addr: r.child.Addr})
	}
	st.balancer = localstack.NewBalancer(backends)
	ctx, cancel := context.WithCancel(context.Background())
	st.t.Cleanup(cancel)
	go st.balancer.Watch(ctx)
}

// throughBalancer passes a push to a live region.
func (p *eventProxy) throughBalancer(ctx context.Context, b *localstack.Balancer, d delivery) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/events/"+d.function, bytes.NewReader(d.body))
	if err != nil {
		return http.StatusInternalServerError
	}
	req.Header = d.header.Clone()
	rec := httptest.NewRecorder()
	b.ServeHTTP(rec, req)
	return rec.Code
}

// waitLive waits until the balancer takes the killed region r as not live
// (its checks, or a failed connection), 10 s at most, and returns the live
// regions.
func (st *drillStack) waitLive(r *regionProcess) []string {
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if !slices.Contains(st.balancer.Live(), r.name) {
			break
		}
	}
	return st.balancer.Live()
}

// kill kills a region's process with SIGKILL.
func (st *drillStack) kill(r *regionProcess) {
	st.t.Helper()
	r.killed = time.Now()
	r.child.Kill()
	st.t.Logf("region %s (pid %d) killed with SIGKILL", r.name, r.child.Cmd.Process.Pid)
}

// Drill 7. A region is lost. The stack runs two regions, each a process
// serving every function with its own scheduler, behind the local
// balancer that Pub/Sub pushes to as well; under a mixed load (reactions
// on a hot item, comments, watches, signed-in reads) the region holding
// the rollup's lease is killed with SIGKILL. Writes keep being accepted (a
// client retry at most), counting, views, rollup, reconciliation and
// detection go on in the other region, and afterwards every count is exact
// (drift 0), every accepted watch is in history and counted once, no
// message waits in a dead letter, and no rollup partition was folded by
// two runs at once.
func TestDrillRegionLost(t *testing.T) {
	stamp := benchreport.Start("go run ./cmd/withemulators -- env " + envRegionsReport + "=$PWD/docs/benchmarks/regions.md go test -count=1 -run TestDrillRegionLost -v ./cmd/drills/")
	st := startStack(t, stackOptions{regions: localstack.Regions(), env: map[string]string{
		// The deployed deadline: three processes share the Spanner
		// emulator's one transaction at a time.
		"REQUEST_TIMEOUT": "10s",
	}})
	started := time.Now()
	l := startLoad(st, workload.Spec{Reactors: 4, Watchers: 3, Commenters: 2, Readers: 2, OwnReads: true,
		Keys: []string{"hot", "video-1"}, Pace: 100 * time.Millisecond})
	waitAccepted(t, l, time.Time{})
	time.Sleep(3 * time.Second)

	victim := st.rollupHolder()
	st.kill(victim)
	killed := victim.killed
	if live := st.waitLive(victim); len(live) != 1 || live[0] == victim.name {
		t.Errorf("live regions after the kill: %v", live)
	}
	waitAccepted(t, l, killed)
	time.Sleep(4 * time.Second)
	finish(t, l)
	stopped := time.Now()
	// Detection goes on: its job answers through the balancer. A run that
	// fails is run again by the job's next minute; here at once. (Its
	// merge shares are written outside spannerdb's turn, which the
	// emulator may drop for another process's transaction.)
	detected := 0
	for try := 1; try <= 10 && detected == 0; try++ {
		if code, b := st.internal("DetectManipulation", "/internal/detect-manipulation"); code == http.StatusOK {
			detected = try
		} else {
			t.Logf("POST /internal/detect-manipulation after the kill, try %d: %d %s", try, code, b)
			time.Sleep(time.Second)
		}
	}
	expect(t, "detection ran after the kill", detected > 0)

	// Counts current again: every accepted write counted, nothing pending.
	var current time.Time
	for {
		drift, err := countDrift(st, l.Model)
		if err == nil && drift == 0 {
			current = time.Now()
			break
		}
		if time.Since(stopped) > convergeWithin {
			t.Fatalf("counts not exact %v after the load stopped: drift %d, %v", convergeWithin, drift, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st.settle(t, l.Model)
	samples := l.Rec.Samples()
	checkAnswers(t, samples, st.cfg.HTTP.RequestTimeout)
	drift, err := countDrift(st, l.Model)
	if err != nil {
		t.Fatal(err)
	}
	if drift != 0 {
		t.Errorf("drift %d after the region was lost, want 0", drift)
	}
	jobs := st.checkLeasedJobs(t)

	// A write answered 503 (or not at all) is retried by the client.
	retried, retriedAfter := 0, 0
	for _, s := range samples {
		if isWrite(s.Op) && (s.Code == 0 || s.Code >= 500 || s.Code == http.StatusTooManyRequests) {
			retried++
			if !s.At.Add(s.Latency).Before(killed) {
				retriedAfter++
			}
		}
	}
	lost := len(l.Errors())
	acceptedAfter := 0
	for _, s := range samples {
		if isWrite(s.Op) && s.Code < 300 && !s.At.Before(killed) {
			acceptedAfter++
		}
	}
	figures := []string{
		fmt.Sprintf("region %s killed %v after the load started", victim.name, killed.Sub(started).Round(100*time.Millisecond)),
		fmt.Sprintf("writes accepted %d (%d sent after the kill), answered 503 and retried %d (%d answered after the kill), lost %d", l.Model.Accepted(), acceptedAfter, retried, retriedAfter, lost),
		fmt.Sprintf("drift %d over %d counters; %d watches, all in history, each counted once", drift, len(l.Model.Keys()), l.Model.Watches()),
		fmt.Sprintf("counts current again %.1f s after the load stopped (it ran %.1f s past the kill)",
			current.Sub(stopped).Seconds(), stopped.Sub(killed).Seconds()),
		"scheduled rollup: " + jobs,
		"answers: " + workload.Summary(samples),
	}
	for _, f := range figures {
		t.Logf("figures: %s", f)
	}
	if path := os.Getenv(envRegionsReport); path != "" && !t.Failed() {
		body := "`TestDrillRegionLost` (cmd/drills/regions_test.go): two regions, each a process serving every function with its own scheduler, behind the local balancer (cmd/internal/localstack), as `REGIONS=2 make run` runs them; one killed with SIGKILL under a mixed load. Times depend on the machine's load; the counts do not.\n\n"
		for _, f := range figures {
			body += "- " + f + "\n"
		}
		if err := stamp.Write(path, "Losing a region (local drill)", body); err != nil {
			t.Error(err)
		}
	}
}

// isWrite says whether op is one of the load's writes.
func isWrite(op string) bool {
	return strings.HasPrefix(op, "PUT ") || strings.HasPrefix(op, "POST ") || strings.HasPrefix(op, "DELETE ")
}

// logLine is one JSON line of a region's log.
type logLine struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
	Job     string    `json:"job"`
	Lease   string    `json:"lease"`
	Seconds float64   `json:"seconds"`
}

// regionLog reads a region's log lines (those that are JSON).
func regionLog(t *testing.T, r *regionProcess) []logLine {
	t.Helper()
	f, err := os.Open(r.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message != "" {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return out
}

// logRollupHeld is rollupfn's line of a run that found its partition's
// lease held by another.
const logRollupHeld = "rollup: partition held by another invocation; folding only its staged views"

// rollupLeases maps each scheduled Rollup job to its partition's lease.
func rollupLeases() map[string]string {
	out := map[string]string{}
	for _, j := range topology.MustLoad().Scheduler {
		if j.Function == "Rollup" {
			out[j.Name] = fmt.Sprintf("rollup/%v/%v", j.Body["partitions"], j.Body["partition"])
		}
	}
	return out
}

// rollupHolder waits until each region's first scheduled runs of the
// rollup have tried for their leases, and returns the region that holds
// the first partition's: losing it leaves the lease held until it
// expires. Either region if neither can be told.
func (st *drillStack) rollupHolder() *regionProcess {
	st.t.Helper()
	var lease string
	for job, l := range rollupLeases() {
		if strings.HasSuffix(job, "-0") {
			lease = l
		}
	}
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(200 * time.Millisecond) {
		for i, r := range st.regions {
			for _, l := range regionLog(st.t, r) {
				if l.Message == logRollupHeld && l.Lease == lease {
					return st.regions[(i+1)%len(st.regions)]
				}
			}
		}
	}
	st.t.Logf("no region found %s held: killing %s", lease, st.regions[0].name)
	return st.regions[0]
}

// run is one scheduled run of a job in a region, as its log tells.
type run struct {
	region     string
	start, end time.Time
	held       bool
}

// checkLeasedJobs checks, from the regions' logs, that no two scheduled
// runs of a rollup partition held its lease at once — Cloud Scheduler
// fires every job in both regions, and the lease must leave the partition
// to one — and summarizes the runs.
func (st *drillStack) checkLeasedJobs(t *testing.T) string {
	t.Helper()
	leases := rollupLeases()
	now := time.Now()
	runs := map[string][]*run{}
	for _, r := range st.regions {
		open := map[string][]*run{} // by job, started and not yet ended, oldest first
		for _, l := range regionLog(t, r) {
			switch {
			case l.Message == localstack.LogJobStarted && leases[l.Job] != "":
				ru := &run{region: r.name, start: l.Time}
				runs[l.Job] = append(runs[l.Job], ru)
				open[l.Job] = append(open[l.Job], ru)
			case l.Message == localstack.LogJobRan && len(open[l.Job]) > 0:
				// The run that started l.Seconds before this line.
				for i, ru := range open[l.Job] {
					if d := l.Time.Sub(ru.start).Seconds() - l.Seconds; d > -0.5 && d < 0.5 {
						ru.end = l.Time
						open[l.Job] = append(open[l.Job][:i], open[l.Job][i+1:]...)
						break
					}
				}
			case l.Message == logRollupHeld:
				// The newest run of the job whose lease it is.
				for job, lease := range leases {
					if lease != l.Lease {
						continue
					}
					for i := len(open[job]) - 1; i >= 0; i-- {
						if !open[job][i].held {
							open[job][i].held = true
							break
						}
					}
				}
			}
		}
		for _, rs := range open {
			for _, ru := range rs {
				switch {
				case !r.killed.IsZero():
					ru.end = r.killed
				default:
					ru.end = now
				}
			}
		}
	}
	var summary []string
	overlaps := 0
	for _, job := range slices.Sorted(maps.Keys(leases)) {
		rs := runs[job]
		var holders []*run
		for _, ru := range rs {
			// A run started less than 10 s ago may not have tried for the
			// lease yet.
			if !ru.held && now.Sub(ru.start) > 10*time.Second {
				holders = append(holders, ru)
			}
		}
		for i, a := range holders {
			for _, b := range holders[i+1:] {
				if a.start.Before(b.end) && b.start.Before(a.end) {
					overlaps++
					t.Errorf("%s: two runs held %s at once: in %s from %s to %s and in %s from %s to %s", job, leases[job],
						a.region, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"), b.region, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000"))
				}
			}
		}
		regions := map[string]int{}
		for _, ru := range rs {
			regions[ru.region]++
		}
		if len(regions) < len(st.regions) {
			t.Errorf("%s ran in %d regions, want every one: %v", job, len(regions), regions)
		}
		summary = append(summary, fmt.Sprintf("%s ran %d times in %d regions, %d of them holding %s", job, len(rs), len(regions), len(holders), leases[job]))
	}
	return fmt.Sprintf("%s; %d pairs of runs held a partition at once", strings.Join(summary, "; "), overlaps)
}
