package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/sethvargo/go-envconfig"

	_ "github.com/videngage/engagement" // every function registers itself
	"github.com/videngage/engagement/cmd/internal/localstack"
	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/spannerdb"
)

// emu is the drills' own emulator stack, started by TestMain.
var emu *emulators.Stack

// logRoot receives the emulators', the test process's and the children's
// logs; it is kept when a drill fails, or when DRILLS_KEEP_LOGS is set.
var logRoot string

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runEventsChild())
	}
	if os.Getenv(envRegion) != "" {
		os.Exit(runRegionChild())
	}
	os.Exit(runDrills(m))
}

func runDrills(m *testing.M) int {
	flag.Parse()
	var err error
	if logRoot, err = os.MkdirTemp("", "engagement-drills-"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: drills:", err)
		return 1
	}
	logFile, err := os.Create(filepath.Join(logRoot, "functions.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: drills:", err)
		return 1
	}
	defer logFile.Close()
	// The functions' own logs (a line per request, every 503 while a
	// backend is down) go to a file, not the test output.
	slog.SetDefault(slog.New(httpx.NewLogHandler(logFile, slog.LevelInfo, "")))

	// A private stack, whatever the environment names: the drills freeze
	// emulators, which must not freeze the tests of other packages that
	// share `make test`'s stack.
	started := time.Now()
	s, err := emulators.Start(context.Background(), emulators.Options{LogDir: logRoot})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the drills need the Google Cloud emulators: %v\n", err)
		return 1
	}
	defer s.Stop()
	for k, v := range s.Env() {
		os.Setenv(k, v)
	}
	emu = s
	// One viewing window holds every drill, so that the loads' models know
	// which watches count as views.
	viewWindow = workload.ViewWindowFor(time.Now(), 6*time.Hour)
	drillDefaults["VIEW_WINDOW"] = viewWindow.String()
	os.Setenv("VIEW_WINDOW", viewWindow.String())
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "drills: emulators started in %v; logs in %s\n", time.Since(started).Round(time.Millisecond), logRoot)
	}
	code := m.Run()
	if code == 0 && os.Getenv("DRILLS_KEEP_LOGS") == "" {
		os.RemoveAll(logRoot)
	} else {
		fmt.Fprintf(os.Stderr, "drills: logs kept in %s\n", logRoot)
	}
	return code
}

// stackOptions shape one drill's system.
type stackOptions struct {
	// env overrides configuration variables (shared/config names).
	env map[string]string
	// child runs the event functions in a child process (an instance of
	// their own, which a drill may kill) instead of in the test process.
	child bool
	// childEnv is added to the environment of the first events child.
	childEnv map[string]string
	// viewsFold, when set, is the Rollup's views fold's staging and store.
	viewsFold *foldProbe
	// regions, when set, runs each named region in a child process of its
	// own serving every function with its own scheduler, as `make run`
	// with REGIONS=2 does, behind the local balancer; this process serves
	// none of them.
	regions []string
}

// drillStack is the whole system in one isolated project of the drills'
// emulators: the HTTP functions served by this process as the local stack
// serves them; the event functions behind an event proxy that Pub/Sub pushes
// to, served by functions-framework-go in this process (as `make run` does)
// or in a child process; and a scheduler running the rollup.
//
// In this process, every Spanner read-write transaction of the stack takes
// the process-wide turn that spannerdb keeps against the emulator, which
// runs one at a time; a child's transactions overlap the parent's and the
// emulator aborts and retries them, which slows both down (an artefact of
// the emulator: Cloud Spanner runs them side by side). Only the drill that
// kills the instance runs it as a child.
type drillStack struct {
	t        *testing.T
	project  string
	env      map[string]string
	cfg      *config.Config
	base     string
	issuer   *localauth.Issuer
	clients  *host.Clients
	outbox   *outboxstore.Store
	counts   *countstore.Store
	folds    *foldstore.Store
	db       *spannerdb.DB
	handlers map[string]http.Handler
	proxy    *eventProxy
	api      *workload.Client

	child    atomic.Pointer[eventsChild]
	children atomic.Int64
	inproc   *inProcess
	// regions and balancer: the stack's regions, when it has some.
	regions  []*regionProcess
	balancer *localstack.Balancer

	stopScheduler func()
}

var worlds atomic.Int64

// drillDefaults are the configuration of every drill unless overridden:
// short request deadlines so that a frozen backend shows within seconds, the
// outbox relay after 10 s instead of 2 min, no rate limits for load.
var drillDefaults = map[string]string{
	"TELEMETRY_EXPORTER":  "none",
	"RATE_LIMITS":         "off",
	"REQUEST_TIMEOUT":     "3s",
	"COUNTER_RELAY_AFTER": "10s",
}

func startStack(t *testing.T, o stackOptions) *drillStack {
	t.Helper()
	ctx := context.Background()
	project := fmt.Sprintf("drill-%d-%d", os.Getpid(), worlds.Add(1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	env := map[string]string{
		"GOOGLE_CLOUD_PROJECT": project,
		"AUTH_AUDIENCE":        project,
		"AUTH_JWKS_URL":        base + "/dev/jwks",
	}
	maps.Copy(env, drillDefaults)
	maps.Copy(env, emu.Env())
	// Bucket names are global: each drill has buckets of its own.
	env["EXPORTS_BUCKET"], env["ERASURE_LOG_BUCKET"] = project+"-exports", project+"-erasure-log"
	maps.Copy(env, o.env)
	cfg, err := config.FromLookuper(ctx, envconfig.MapLookuper(env))
	if err != nil {
		t.Fatal(err)
	}
	st := &drillStack{
		t: t, project: project, env: env, cfg: cfg, base: base, handlers: map[string]http.Handler{},
		api: workload.NewClient(base),
	}
	st.proxy = newEventProxy(st)
	if st.proxy.log, err = os.Create(filepath.Join(logRoot, strings.ReplaceAll(t.Name(), "/", "_")+"-pushes.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.proxy.log.Close() })

	teardown, err := localstack.ProvisionConfig(ctx, emu, cfg, func(fn string) string { return base + "/events/" + fn })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(teardown)

	// The server answers 503 until the functions are built; JWKS first,
	// since the verifier may fetch the keys while it is built.
	mux := http.NewServeMux()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if st.issuer, err = localauth.New(project); err != nil {
		t.Fatal(err)
	}
	mux.Handle("GET /dev/jwks", st.issuer.JWKSHandler())
	mux.Handle("POST /events/{function}", st.proxy)

	needs := host.NeedSpanner | host.NeedBigtable | host.NeedPubSub | host.NeedFirestore | host.NeedVerifier | host.NeedObjects
	if st.clients, err = host.New(ctx, cfg, needs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.clients.Close() })
	st.db = spannerdb.Wrap(st.clients.Spanner, cfg)
	st.outbox, st.counts, st.folds = outboxstore.New(st.db), countstore.New(st.db), foldstore.New(st.db, foldstore.Options{})

	if len(o.regions) > 0 {
		st.startRegions(o.regions)
		mux.Handle("/", st.balancer)
		st.startScheduler()
		st.waitReady()
		return st
	}

	instead := map[string]http.Handler{}
	if o.viewsFold != nil {
		instead["Rollup"] = st.rollupWithViewsFold(o.viewsFold)
	}
	if st.handlers, err = localstack.MountHTTP(ctx, mux, st.clients, instead); err != nil {
		t.Fatal(err)
	}

	if o.child {
		t.Cleanup(st.stopChild)
		st.startChild(o.childEnv)
	} else {
		st.inproc = serveInProcess(t, st.clients)
	}
	st.startScheduler()
	st.waitReady()
	return st
}

// waitReady waits until every backend answers through the stack's clients.
func (st *drillStack) waitReady() {
	st.t.Helper()
	if err := localstack.WaitBackends(context.Background(), st.clients); err != nil {
		st.t.Fatal(err)
	}
}

// startScheduler runs the rollup once a second, as Cloud Scheduler's
// minute does every ROLLUP_INTERVAL, including the outbox relay (a bare
// POST relays and folds once). stopScheduler stops it.
func (st *drillStack) startScheduler() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				st.internal("Rollup", "/internal/rollup")
			}
		}
	}()
	var once sync.Once
	st.stopScheduler = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	st.t.Cleanup(st.stopScheduler)
}

// internal calls a scheduled function's handler with a bare POST, as an
// operator would, and returns its answer; a stack of regions is called
// through its balancer.
func (st *drillStack) internal(function, route string) (int, []byte) {
	if st.balancer != nil {
		code, _, b, err := st.api.Send(http.MethodPost, route, "", "")
		if err != nil {
			return 0, []byte(err.Error())
		}
		return code, b
	}
	h, ok := st.handlers[function]
	if !ok {
		return http.StatusNotFound, nil
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, route, nil))
	return rec.Code, rec.Body.Bytes()
}

// token mints an ID token for uid with the stack's local issuer.
func (st *drillStack) token(uid string) string {
	st.t.Helper()
	tok, err := st.issuer.Mint(uid)
	if err != nil {
		st.t.Fatal(err)
	}
	return tok
}

// ---- the event functions' instance: a child process

const (
	envChild = "DRILLS_EVENTS_CHILD" // set in the child
	envCrash = "DRILLS_CRASH"        // <function>:<before-commit|after-commit>:<call number>
	envStats = "DRILLS_STATS_FILE"   // where the child's store probes write a line per call
)

// eventsChild is one run of the event functions' process, started and
// tied to this one as the local stack's regions are (localstack.StartChild).
type eventsChild struct {
	*localstack.Child
	n   int64
	log string
}

// startChild starts a new events child and makes the event proxy use it.
func (st *drillStack) startChild(extra map[string]string) *eventsChild {
	st.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		st.t.Fatal(err)
	}
	n := st.children.Add(1)
	c := &eventsChild{n: n}
	c.log = filepath.Join(logRoot, fmt.Sprintf("%s-events-%d.log", strings.ReplaceAll(st.t.Name(), "/", "_"), n))
	logf, err := os.Create(c.log)
	if err != nil {
		st.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envChild+"=1")
	for k, v := range st.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if c.Child, err = localstack.StartChild(cmd, 60*time.Second); err != nil {
		st.t.Fatalf("events child %d: %v; log:\n%s", n, err, tail(c.log, 40))
	}
	st.child.Store(c)
	go func() {
		<-c.Exited
		st.child.CompareAndSwap(c, nil)
	}()
	return c
}

// stopChild kills the current events child, if any.
func (st *drillStack) stopChild() {
	if c := st.child.Swap(nil); c != nil {
		c.Kill()
	}
}

// waitExit waits for child c to exit by itself and returns its exit code.
func (st *drillStack) waitExit(c *eventsChild, within time.Duration) int {
	st.t.Helper()
	select {
	case <-c.Exited:
		st.child.CompareAndSwap(c, nil)
		c.Release()
		return c.Code
	case <-time.After(within):
		st.t.Fatalf("events child %d still running after %v; log:\n%s", c.n, within, tail(c.log, 40))
		return 0
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---- the event proxy: where Pub/Sub pushes

// delivery is one Pub/Sub push as the event proxy saw it.
type delivery struct {
	function  string
	header    http.Header
	body      []byte
	sub       string
	id        string // message id
	published time.Time
	data      []byte
	attrs     map[string]string
	n         int // the how-manieth delivery of this message on this subscription
}

func (d delivery) key() string { return d.sub + "|" + d.id }

// fault decides a delivery's answer instead of the proxy (handled true).
type fault func(d delivery) (code int, handled bool)

// eventProxy passes pushes to the current events child, one answer per push
// (held while no child runs, 503 past childWait, so Pub/Sub redelivers), counts deliveries per
// message and lets a drill put a fault in between.
type eventProxy struct {
	st     *drillStack
	client *http.Client

	mu         sync.Mutex
	fault      fault
	deliveries map[string]int
	answers    map[int]int
	log        *os.File // a line per push: time, subscription, message, attempt, answer, duration
}

func newEventProxy(st *drillStack) *eventProxy {
	return &eventProxy{
		st:         st,
		client:     &http.Client{Timeout: 90 * time.Second},
		deliveries: map[string]int{},
		answers:    map[int]int{},
	}
}

func (p *eventProxy) setFault(f fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
}

// deliveriesOf returns how many times each message was pushed, by
// "subscription|message id".
func (p *eventProxy) deliveriesOf() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.deliveries)
}

func (p *eventProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	d := parsePush(r.PathValue("function"), r.Header, body)
	p.mu.Lock()
	p.deliveries[d.key()]++
	d.n = p.deliveries[d.key()]
	f := p.fault
	p.mu.Unlock()
	code, handled := 0, false
	if f != nil {
		code, handled = f(d)
	}
	start := time.Now()
	if p.log != nil {
		p.mu.Lock()
		fmt.Fprintf(p.log, "%s %s %s %d start\n", start.Format("15:04:05.000"), d.sub, d.id, d.n)
		p.mu.Unlock()
	}
	if !handled {
		code = p.forward(r.Context(), d)
	}
	p.mu.Lock()
	p.answers[code]++
	if p.log != nil {
		fmt.Fprintf(p.log, "%s %s %s %d %d %v\n", start.Format("15:04:05.000"), d.sub, d.id, d.n, code, time.Since(start).Round(time.Millisecond))
	}
	p.mu.Unlock()
	w.WriteHeader(code)
}

// childWait is how long a push waits for an events child to serve it while
// none runs (one crashed and the next is starting), as Cloud Run holds a
// request while it starts an instance; past it, or when the push gives up
// first, the answer is 503.
const childWait = 30 * time.Second

// forward passes d to the event function and returns its answer: 503 when
// no instance runs within childWait.
func (p *eventProxy) forward(ctx context.Context, d delivery) int {
	if b := p.st.balancer; b != nil {
		return p.throughBalancer(ctx, b, d)
	}
	var url string
	if in := p.st.inproc; in != nil {
		url = "http://" + in.addr + "/events/" + d.function
	} else if c := p.waitChild(ctx); c != nil {
		url = "http://" + c.Addr + "/events/" + d.function
	} else {
		return http.StatusServiceUnavailable
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.body))
	if err != nil {
		return http.StatusInternalServerError
	}
	req.Header = d.header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		return http.StatusBadGateway
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitChild returns the running events child, waiting up to childWait for
// one to start; nil if none did or ctx ended first.
func (p *eventProxy) waitChild(ctx context.Context) *eventsChild {
	ctx, cancel := context.WithTimeout(ctx, childWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c := p.st.child.Load(); c != nil {
			return c
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func parsePush(function string, h http.Header, body []byte) delivery {
	m, sub, _ := bus.DecodePush(body) // a body that is no push is passed on as it is
	return delivery{
		function: function, header: h.Clone(), body: body, sub: sub, id: m.ID,
		published: m.PublishTime, data: m.Data, attrs: m.Attributes,
	}
}
