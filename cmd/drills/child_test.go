package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/videngage/engagement/cmd/internal/localstack"
	applycountersfn "github.com/videngage/engagement/functions/applycounters"
	applyhistoryfn "github.com/videngage/engagement/functions/applyhistory"
	applyviewsfn "github.com/videngage/engagement/functions/applyviews"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/views/claimstore"
	"github.com/videngage/engagement/shared/views/viewstore"
)

// runEventsChild is the events child: the registered event functions served
// by functions-framework-go, as one Cloud Functions instance serves them,
// many pushes at once.
//
// With DRILLS_STATS_FILE or DRILLS_CRASH set, ApplyCounters and ApplyHistory
// are the production handlers over a probe of their store: it writes a line
// per call and, at the chosen call, exits the process before or after the
// store's commit — the crash of an instance between its commit and its ack.
func runEventsChild() int {
	gone, _ := localstack.ParentGone(context.Background())
	go func() {
		// The test process is gone, so is this one.
		<-gone.Done()
		os.Exit(0)
	}()
	targets := map[string]string{}
	for _, r := range host.All() {
		if r.Push != nil {
			targets[r.Name] = r.Name
		}
	}
	if os.Getenv(envStats) != "" || os.Getenv(envCrash) != "" {
		if err := registerProbes(targets); err != nil {
			fmt.Fprintln(os.Stderr, "events child:", err)
			return 1
		}
	}
	events, err := localstack.EventFunctions(targets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "events child:", err)
		return 1
	}
	front := http.NewServeMux()
	front.Handle("POST /events/{function}", events)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "events child:", err)
		return 1
	}
	if err := localstack.ChildReady(ln.Addr().String()); err != nil {
		fmt.Fprintln(os.Stderr, "events child:", err)
		return 1
	}
	err = (&http.Server{Handler: front, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	fmt.Fprintln(os.Stderr, "events child:", err)
	return 1
}

// crashPlan is DRILLS_CRASH: exit at call n of function, before or after
// the store's commit.
type crashPlan struct {
	function string
	point    string // "before-commit" or "after-commit"
	n        int64
}

func parseCrash(s string) (crashPlan, error) {
	if s == "" {
		return crashPlan{}, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 || (parts[1] != "before-commit" && parts[1] != "after-commit") {
		return crashPlan{}, fmt.Errorf("%s=%q: want <function>:<before-commit|after-commit>:<call>", envCrash, s)
	}
	n, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || n < 1 {
		return crashPlan{}, fmt.Errorf("%s=%q: the call number must be positive", envCrash, s)
	}
	return crashPlan{function: parts[0], point: parts[1], n: n}, nil
}

// probeLine is one store call as the probe saw it.
type probeLine struct {
	Function   string   `json:"function"`
	Call       int64    `json:"call"`
	IDs        []string `json:"ids"`
	Applied    int      `json:"applied"`
	Duplicates int      `json:"duplicates"`
	Err        string   `json:"err,omitempty"`
	Crash      string   `json:"crash,omitempty"`
}

// probe records calls and crashes the process where the plan says.
type probe struct {
	function string
	plan     crashPlan
	calls    atomic.Int64
	mu       sync.Mutex
	out      *os.File
}

func (p *probe) write(l probeLine) {
	if p.out == nil {
		return
	}
	b, _ := json.Marshal(l)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.Write(append(b, '\n')) // one write per line: O_APPEND keeps lines whole
}

// crashIf exits the process when the call and the point are the plan's.
func (p *probe) crashIf(call int64, point string, l probeLine) {
	if p.plan.function != p.function || p.plan.point != point || p.plan.n != call {
		return
	}
	l.Crash = point
	p.write(l)
	fmt.Fprintf(os.Stderr, "events child: %s call %d: exiting %s, as planned\n", p.function, call, point)
	os.Exit(3)
}

type counterProbe struct {
	probe
	inner applycountersfn.Store
}

func (p *counterProbe) Apply(ctx context.Context, evs []events.Event) (counter.ApplyStats, error) {
	call := p.calls.Add(1)
	l := probeLine{Function: p.function, Call: call}
	for _, e := range evs {
		l.IDs = append(l.IDs, e.ID)
	}
	p.crashIf(call, "before-commit", l)
	st, err := p.inner.Apply(ctx, evs)
	l.Applied, l.Duplicates = st.Applied, st.Duplicates
	if err != nil {
		l.Err = err.Error()
	} else {
		p.crashIf(call, "after-commit", l)
	}
	p.write(l)
	return st, err
}

// viewsProbe is ApplyViews' stage (or count): "before-commit" is after
// the batch's claims in Bigtable and before its events are staged,
// "after-commit" after they are.
type viewsProbe struct {
	probe
	inner applyviewsfn.Views
}

func (p *viewsProbe) Put(ctx context.Context, batchID string, evs []events.Event) error {
	call := p.calls.Add(1)
	l := probeLine{Function: p.function, Call: call}
	for _, e := range evs {
		l.IDs = append(l.IDs, e.ID)
	}
	p.crashIf(call, "before-commit", l)
	err := p.inner.Put(ctx, batchID, evs)
	if err != nil {
		l.Err = err.Error()
	} else {
		l.Applied = len(evs)
		p.crashIf(call, "after-commit", l)
	}
	p.write(l)
	return err
}

type historyProbe struct {
	probe
	inner applyhistoryfn.Store
}

func (p *historyProbe) Apply(ctx context.Context, w history.Watch) error {
	call := p.calls.Add(1)
	l := probeLine{Function: p.function, Call: call, IDs: []string{w.EventID}}
	p.crashIf(call, "before-commit", l)
	err := p.inner.Apply(ctx, w)
	if err != nil {
		l.Err = err.Error()
	} else {
		l.Applied = 1
		p.crashIf(call, "after-commit", l)
	}
	p.write(l)
	return err
}

// registerProbes registers ApplyCounters, ApplyHistory and ApplyViews over probed stores
// under names of their own and points targets at them.
func registerProbes(targets map[string]string) error {
	plan, err := parseCrash(os.Getenv(envCrash))
	if err != nil {
		return err
	}
	var out *os.File
	if path := os.Getenv(envStats); path != "" {
		if out, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return err
		}
	}
	ctx := context.Background()
	cfg, err := config.FromEnv(ctx)
	if err != nil {
		return err
	}
	c, err := host.New(ctx, cfg, host.NeedSpanner|host.NeedBigtable)
	if err != nil {
		return err
	}
	store, err := applycountersfn.Build(c)
	if err != nil {
		return err
	}
	cp := &counterProbe{probe: probe{function: "ApplyCounters", plan: plan, out: out}, inner: store}
	hp := &historyProbe{probe: probe{function: "ApplyHistory", plan: plan, out: out}, inner: historystore.New(c.Bigtable)}
	vp := &viewsProbe{probe: probe{function: "ApplyViews", plan: plan, out: out}, inner: viewstore.NewStaging(c.BigtableTx)}
	functions.HTTP("ApplyCountersProbed", applycountersfn.New(cp, c.Metrics).ServeHTTP)
	functions.HTTP("ApplyHistoryProbed", applyhistoryfn.New(hp, c.Metrics).ServeHTTP)
	functions.HTTP("ApplyViewsProbed", applyviewsfn.New(claimstore.NewClaims(c.BigtableTx, c.Config.History.ViewWindow), vp, history.NewViewerHasher(c.Config.History.ViewerHashKey), applyviewsfn.Eligibility{}, nil, c.Metrics).ServeHTTP)
	targets["ApplyCounters"] = "ApplyCountersProbed"
	targets["ApplyHistory"] = "ApplyHistoryProbed"
	targets["ApplyViews"] = "ApplyViewsProbed"
	return nil
}

// readProbes reads the lines the children's probes wrote to path.
func readProbes(path string) ([]probeLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []probeLine
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var l probeLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return nil, fmt.Errorf("probe line %q: %w", line, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// ---- the event functions in the test process

// inProcessPath is where this process's functions framework serves an event
// function for the drill stacks: functions-framework-go runs one server per
// process, so it is started once and dispatches to the functions of the
// stack running now (drills run one after another).
func inProcessPath(function string) string {
	return "drills/" + function
}

var (
	frameworkOnce sync.Once
	frameworkAddr string
	frameworkErr  error
	// current holds the event functions of the running drill stack, built
	// on its clients by their registered builders.
	current atomic.Pointer[map[string]http.Handler]
)

// inProcess is a stack's way to its event functions in this process: the
// address that serves their pushes at /events/<Name>.
type inProcess struct {
	addr string
}

// serveInProcess builds the registered event functions on a stack's clients
// and serves them through this process's functions framework.
func serveInProcess(t *testing.T, c *host.Clients) *inProcess {
	t.Helper()
	fns := map[string]http.Handler{}
	for _, r := range host.All() {
		if r.Push == nil {
			continue
		}
		fn, err := r.Push(context.Background(), c)
		if err != nil {
			t.Fatalf("build %s: %v", r.Name, err)
		}
		fns[r.Name] = fn
	}
	if !current.CompareAndSwap(nil, &fns) {
		t.Fatal("another drill stack serves its event functions in this process: drills run one at a time")
	}
	t.Cleanup(func() { current.Store(nil) })
	frameworkOnce.Do(func() { frameworkAddr, frameworkErr = startFramework() })
	if frameworkErr != nil {
		t.Fatal(frameworkErr)
	}
	return &inProcess{addr: frameworkAddr}
}

// startFramework registers, for every event function, one that dispatches
// to the running drill stack's, and serves their pushes (localstack's event
// front) on a loopback port, whose address it returns.
func startFramework() (string, error) {
	paths := map[string]string{}
	for _, r := range host.All() {
		if r.Push == nil {
			continue
		}
		name := r.Name
		paths[name] = inProcessPath(name)
		functions.HTTP(inProcessPath(name), func(w http.ResponseWriter, req *http.Request) {
			fns := current.Load()
			if fns == nil {
				httpx.WriteError(w, req, httpx.Unavailable(errs.BackendUnavailable, time.Second, "%s: no drill stack is running", name))
				return
			}
			(*fns)[name].ServeHTTP(w, req)
		})
	}
	events, err := localstack.EventFunctions(paths)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /events/{function}", events)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	return ln.Addr().String(), nil
}
