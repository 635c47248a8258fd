// Package benchstack is the benchmarks' part of the local stack: a loopback
// server whose handler is set after the world is provisioned, the counter
// functions every benchmark needs (Counts, Reconcile, the ApplyCounters push
// endpoint, the rollup folding every interval), and the measuring helpers.
// Only the benchmark commands import it, so `make run` (cmd/local) links
// none of it.
package benchstack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"cloud.google.com/go/spanner"
	"github.com/sethvargo/go-envconfig"

	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/cmd/internal/localstack"
	applycountersfn "github.com/videngage/engagement/functions/applycounters"
	countsfn "github.com/videngage/engagement/functions/counts"
	"github.com/videngage/engagement/functions/host"
	reconcilefn "github.com/videngage/engagement/functions/reconcile"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Server is a loopback HTTP server whose handler is set after start: the
// push endpoints must be known before the subscriptions are provisioned, and
// the handlers need the provisioned world.
type Server struct {
	URL     string
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
	// pushes counts each event function's pushes (*pushCount by function).
	pushes sync.Map
}

// pushCount is an event function's pushes answered and the time during
// which at least one was in progress.
type pushCount struct {
	mu       sync.Mutex
	n        int64
	inFlight int
	since    time.Time
	busy     time.Duration
}

func (c *pushCount) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight == 0 {
		c.since = time.Now()
	}
	c.inFlight++
}

func (c *pushCount) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.inFlight--
	if c.inFlight == 0 {
		c.busy += time.Since(c.since)
	}
}

// Pushes returns how many pushes function has answered on this server and
// the time during which at least one was in progress: for a function that
// takes one push at a time, the time its instance was occupied.
func (s *Server) Pushes(function string) (n int64, busy time.Duration) {
	if c, ok := s.pushes.Load(function); ok {
		c := c.(*pushCount)
		c.mu.Lock()
		defer c.mu.Unlock()
		busy = c.busy
		if c.inFlight > 0 {
			busy += time.Since(c.since)
		}
		return c.n, busy
	}
	return 0, 0
}

// StartServer listens on a free loopback port; until Set, it answers 503.
func StartServer() (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + l.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := s.handler.Load()
		if h == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fn, push := strings.CutPrefix(r.URL.Path, "/push/")
		if !push {
			(*h).ServeHTTP(w, r)
			return
		}
		c, _ := s.pushes.LoadOrStore(fn, new(pushCount))
		c.(*pushCount).begin()
		defer c.(*pushCount).end()
		(*h).ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(l)
	return s, nil
}

// Set serves h from now on.
func (s *Server) Set(h http.Handler) { s.handler.Store(&h) }

// Close stops serving.
func (s *Server) Close() { s.srv.Close() }

// PushEndpoint is where the subscriptions of an event function push.
func (s *Server) PushEndpoint(function string) string { return s.URL + "/push/" + function }

// Provision creates a world named project on es whose subscriptions push to
// srv, sets the process environment the client libraries read (the
// *_EMULATOR_HOST variables), and returns the world's configuration: the
// emulators', the project's, and env's variables. Call teardown when done.
func Provision(ctx context.Context, es *emulators.Stack, srv *Server, project string, env map[string]string) (cfg *config.Config, teardown func(), err error) {
	all := es.Env()
	all["GOOGLE_CLOUD_PROJECT"] = project
	for k, v := range env {
		all[k] = v
	}
	for k, v := range all {
		os.Setenv(k, v)
	}
	if cfg, err = config.FromLookuper(ctx, envconfig.MapLookuper(all)); err != nil {
		return nil, nil, err
	}
	if teardown, err = localstack.ProvisionConfig(ctx, es, cfg, srv.PushEndpoint); err != nil {
		return nil, nil, err
	}
	return cfg, teardown, nil
}

// World is one benchmark's emulators, its push server and one provisioned
// world on them, with a Spanner client of its database.
type World struct {
	Emulators *emulators.Stack
	Server    *Server
	Config    *config.Config
	DB        *spannerdb.DB
	teardown  func()
}

// Start attaches to (or starts) the emulators as name, starts a push server,
// provisions project on them with env (see Provision) and opens its
// database. Close undoes all four.
func Start(ctx context.Context, name, project string, env map[string]string) (*World, error) {
	es, err := localstack.Emulators(ctx, name, emulators.Options{})
	if err != nil {
		return nil, err
	}
	srv, err := StartServer()
	if err != nil {
		es.Stop()
		return nil, err
	}
	cfg, teardown, err := Provision(ctx, es, srv, project, env)
	if err != nil {
		srv.Close()
		es.Stop()
		return nil, err
	}
	db, err := spannerdb.New(ctx, cfg)
	if err != nil {
		teardown()
		srv.Close()
		es.Stop()
		return nil, err
	}
	return &World{Emulators: es, Server: srv, Config: cfg, DB: db, teardown: teardown}, nil
}

// Close closes the database's client, tears the world down, stops the
// server and the emulators it started.
func (w *World) Close() {
	w.DB.Client.Close()
	w.teardown()
	w.Server.Close()
	w.Emulators.Stop()
}

// Stack is the counter functions of one world served on one Server: Counts
// at /v1/counts and /v1/me/counts, Reconcile at /internal/reconcile,
// ApplyCounters at its push endpoint (the other push endpoints acknowledge
// and drop), the local issuer's keys at /jwks, and the rollup folding every
// ROLLUP_INTERVAL.
type Stack struct {
	Config    *config.Config
	Clients   *host.Clients
	Issuer    *localauth.Issuer
	DB        *spannerdb.DB
	Outbox    *outboxstore.Store
	Counts    *countstore.Store
	Folds     *foldstore.Store
	Recon     *reconcilestore.Store
	Reconcile http.Handler

	name  string
	stop  context.CancelFunc
	done  sync.WaitGroup
	likes atomic.Int64
}

// CountedLikes is how many likes ApplyCounters has counted so far
// (duplicates not included): a benchmark waits on it without reading
// Spanner.
func (st *Stack) CountedLikes() int64 { return st.likes.Load() }

// countingStore counts the likes its store counts.
type countingStore struct {
	*outboxstore.Store
	likes *atomic.Int64
}

func (c countingStore) Apply(ctx context.Context, evs []events.Event) (counter.ApplyStats, error) {
	s, err := c.Store.Apply(ctx, evs)
	c.likes.Add(s.Counted.Likes)
	return s, err
}

// New builds the stack over cfg (whose Auth it points at a local issuer
// served by srv), lets mount add the command's own functions to its mux, and
// serves it all on srv. name prefixes its log lines.
func New(ctx context.Context, name string, cfg *config.Config, srv *Server, mount func(st *Stack, mux *http.ServeMux) error) (*Stack, error) {
	issuer, err := localauth.New(cfg.Project)
	if err != nil {
		return nil, err
	}
	cfg.Auth.Audience = cfg.Project
	cfg.Auth.Issuer = ""
	cfg.Auth.JWKSURL = srv.URL + "/jwks"
	clients, err := host.New(ctx, cfg, host.NeedSpanner|host.NeedBigtable|host.NeedPubSub|host.NeedVerifier)
	if err != nil {
		return nil, err
	}
	st := &Stack{Config: cfg, Clients: clients, Issuer: issuer, DB: spannerdb.Wrap(clients.Spanner, cfg), name: name}
	st.Outbox, err = applycountersfn.Build(clients)
	if err != nil {
		clients.Close()
		return nil, err
	}
	st.Counts = countstore.New(st.DB)
	st.Folds = foldstore.FromConfig(st.DB, cfg.Counters)
	st.Recon = reconcilestore.New(st.DB, reconcilestore.Options{})
	st.Reconcile = reconcilefn.New(reconcilefn.Deps{Store: st.Recon, Flags: reactionstore.New(st.DB), Sources: reconcilefn.Sources()})
	mux := http.NewServeMux()
	mux.Handle("/jwks", issuer.JWKSHandler())
	cd, err := countsfn.Build(clients)
	if err != nil {
		clients.Close()
		return nil, err
	}
	cd.Store = st.Counts
	counts := countsfn.New(cd)
	mux.Handle("/v1/counts", counts)
	mux.Handle("/v1/me/counts", counts)
	mux.Handle("/internal/reconcile", st.Reconcile)
	mux.Handle("/push/ApplyCounters", applycountersfn.New(countingStore{st.Outbox, &st.likes}, nil))
	mux.Handle("/push/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // other event functions: not part of this stack
	}))
	if err := mount(st, mux); err != nil {
		clients.Close()
		return nil, err
	}
	srv.Set(mux)

	rctx, cancel := context.WithCancel(context.Background())
	st.stop = cancel
	st.done.Add(1)
	go st.tickRollup(rctx)
	return st, nil
}

// tickRollup folds every ROLLUP_INTERVAL, as the Rollup function does inside
// each scheduled minute.
func (st *Stack) tickRollup(ctx context.Context) {
	defer st.done.Done()
	t := time.NewTicker(st.Config.Counters.RollupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := st.Folds.Fold(ctx); err != nil && ctx.Err() == nil {
				slog.Warn(st.name+": fold failed", "error", err.Error())
			}
		}
	}
}

// Close stops the rollup and closes the clients.
func (st *Stack) Close() {
	st.stop()
	st.done.Wait()
	st.Clients.Close()
}

// SpannerClockLead is how far the Spanner emulator's clock runs ahead of
// this machine's: the commit timestamp of an empty read-write transaction
// less the time its commit returned (so at least this far). The emulator
// hands out timestamps at least a microsecond apart (common/clock.cc in
// cloud-spanner-emulator), so calls closer together than that push its
// clock ahead for good — about 0.75 µs a read call measured here — and a
// strong read waits until the machine's clock reaches its timestamp
// (backend/locking/manager.cc, WaitForSafeRead): every strong read on the
// emulator waits about this long, a wait that grows with the calls the
// emulator has served since it started. Cloud Spanner has no such lead.
func SpannerClockLead(ctx context.Context, db *spannerdb.DB) (time.Duration, error) {
	ts, err := db.InTx(spannerdb.Uncounted(ctx), func(context.Context, *spanner.ReadWriteTransaction) error { return nil })
	if err != nil {
		return 0, fmt.Errorf("benchstack.SpannerClockLead: %w", err)
	}
	return ts.Sub(time.Now()), nil
}

// NewClient returns an HTTP client keeping enough idle connections for conc
// concurrent callers.
func NewClient(conc int, timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conc * 2
	tr.MaxIdleConnsPerHost = conc * 2
	return &http.Client{Transport: tr, Timeout: timeout}
}

// Percentiles sorts d and returns its 50th and 99th percentiles (nearest
// rank); zero when d is empty.
func Percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) time.Duration {
		i := int(p*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return at(0.50), at(0.99)
}

// Main runs the benchmark command name as cmdmain.Run does, with the global
// meter provider read by otelcount and warnings and worse logged to stderr.
func Main(name string, run func(ctx context.Context) error) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	// Call counts come from the OpenTelemetry instruments, read in process.
	otelcount.Global()
	cmdmain.Run(name, run)
}
