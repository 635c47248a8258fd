// Package localstack assembles the system on the Google Cloud emulators, for
// everything that runs it outside the cloud: cmd/local (make run), the
// benchmark commands and the fault drills. It attaches to or starts the
// emulators, provisions a world in them, builds the registered HTTP
// functions on one set of clients and serves them at their topology routes
// as the cloud does, serves the registered event functions (HTTP functions
// that read Pub/Sub pushes) with functions-framework-go where Pub/Sub
// pushes, and waits until every
// backend answers. The benchmarks' counter stack (cmd/internal/benchstack)
// is built on the same world.
//
// It also runs the stack as two regions (REGIONS=2): each region a child
// process (StartChild) serving every function with its own scheduler
// (ServeRegion), behind a local load balancer (Balancer) that passes each
// request to a live one.
//
// The per-package tests use internal/emulators/emulatortest instead: the
// same emulators and the same provisioning (internal/emulators), one world
// per test, with the package's own handlers built directly.
package localstack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/topology"
)

// Emulators returns the running emulators named by the *_EMULATOR_HOST
// variables, or starts them with opts (saying so on stderr as name). Stop
// the stack when done: stopping an attached one does nothing.
func Emulators(ctx context.Context, name string, opts emulators.Options) (*emulators.Stack, error) {
	if es, ok := emulators.Attach(); ok {
		slog.Info("using the running emulators", "hosts", es.Hosts)
		return es, nil
	}
	fmt.Fprintf(os.Stderr, "%s: starting the emulators…\n", name)
	started := time.Now()
	es, err := emulators.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	slog.Info("emulators started", "in", time.Since(started).Round(time.Millisecond), "logs", opts.LogDir)
	return es, nil
}

// ProvisionConfig creates cfg's world in es (cfg.Project: the Spanner
// instance and database, the Bigtable tables and their GC policies, the
// Pub/Sub topics and subscriptions, the buckets), the subscriptions of each event
// function pushing to push(function). teardown deletes the world.
func ProvisionConfig(ctx context.Context, es *emulators.Stack, cfg *config.Config, push func(function string) string) (teardown func(), err error) {
	target := emulators.Target{
		Project:           cfg.Project,
		SpannerInstance:   cfg.Spanner.Instance,
		SpannerDatabase:   cfg.Spanner.Database,
		BigtableInstance:  cfg.Bigtable.Instance,
		PushEndpoint:      push,
		HistoryMaxAgeDays: cfg.History.MaxAgeDays,
		Buckets:           cfg.Buckets(),
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := emulators.Provision(pctx, es.Hosts, target); err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := emulators.Teardown(ctx, es.Hosts, target); err != nil {
			slog.Warn("teardown of the world failed", "project", target.Project, "error", err)
		}
	}, nil
}

// MountHTTP builds every HTTP and scheduled function of the topology with
// its registered builder on c, wraps it as the cloud serves it
// (httpx.Standard), and serves it at its routes on mux. It returns the
// handlers by function name. A function of the topology that no package
// registers is an error, as terraform/check makes it one for a deployment.
// instead names handlers to serve in place of the built ones (a drill's
// probed Rollup), wrapped the same way.
func MountHTTP(ctx context.Context, mux *http.ServeMux, c *host.Clients, instead map[string]http.Handler) (map[string]http.Handler, error) {
	builders := map[string]host.HTTPBuilder{}
	for _, r := range host.All() {
		if r.HTTP != nil {
			builders[r.Name] = r.HTTP
		}
	}
	handlers := map[string]http.Handler{}
	for _, f := range topology.MustLoad().Functions {
		if f.Kind == topology.KindEvent {
			continue
		}
		b, ok := builders[f.Name]
		if !ok {
			return nil, fmt.Errorf("%s is in topology.json but no function package registers it", f.Name)
		}
		built, ok := instead[f.Name]
		if !ok {
			var err error
			if built, err = b(ctx, c); err != nil {
				return nil, fmt.Errorf("build %s: %w", f.Name, err)
			}
		}
		h := httpx.Standard(f.Name, c.Config.Project, c.Config.HTTP.AllowedOrigins, c.Config.HTTP.RequestTimeout)(built)
		handlers[f.Name] = h
		for _, route := range f.Routes {
			mux.Handle(route, h)
		}
	}
	return handlers, nil
}

// EventFunctions serves the registered event functions with
// functions-framework-go on a free loopback port, each building its clients
// from the environment on first use as a Cloud Functions instance does, and
// returns the handler of their pushes, POST /events/{function}, as many at
// once as arrive. paths names the framework path of a function registered
// under another name than its own (the drills' probes); by default a
// function is served at /<Name>. The framework serves one port per
// process: call this once.
func EventFunctions(paths map[string]string) (http.Handler, error) {
	known := map[string]string{}
	for _, r := range host.All() {
		if r.Push != nil {
			known[r.Name] = "/" + r.Name
		}
	}
	for name, p := range paths {
		if _, ok := known[name]; !ok {
			return nil, fmt.Errorf("event functions: %s is not registered", name)
		}
		known[name] = "/" + p
	}
	addr, err := startFramework()
	if err != nil {
		return nil, err
	}
	target, _ := url.Parse("http://" + addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("function")
		to, ok := known[name]
		if !ok {
			httpx.WriteError(w, r, httpx.NotFound(errs.UnknownPath, "no event function %q", name))
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = to
		proxy.ServeHTTP(w, r2)
	}), nil
}

// startFramework starts functions-framework-go on a loopback port and
// returns its address once it listens there. The port was free when picked;
// if another process binds it first, the framework's listen fails and a new
// port is tried, so the address returned is the framework's own.
func startFramework() (string, error) {
	for attempt := 1; ; attempt++ {
		p, err := emulators.FreePort()
		if err != nil {
			return "", err
		}
		addr := "127.0.0.1:" + strconv.Itoa(p)
		stopped := make(chan error, 1)
		go func() { stopped <- funcframework.StartHostPort("127.0.0.1", strconv.Itoa(p)) }()
		err = waitServing(addr, stopped)
		if err == nil {
			go func() { slog.Error("functions framework stopped", "error", <-stopped) }()
			return addr, nil
		}
		if attempt == 5 {
			return "", fmt.Errorf("functions framework: %w", err)
		}
	}
}

// waitServing waits until addr accepts connections while the server that
// reports on stopped still runs: a dial answered while it has stopped (its
// listen failed) is another process's port. It polls, 20 s at most.
func waitServing(addr string, stopped <-chan error) error {
	listening := false
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-stopped:
			return fmt.Errorf("serving %s: %w", addr, err)
		default:
		}
		// A dial answered, then a poll later the server still runs: its
		// listen, which fails at once on a taken port, succeeded.
		if listening {
			return nil
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			listening = true
		}
		if time.Since(start) > 20*time.Second {
			return fmt.Errorf("nothing listens on %s", addr)
		}
	}
}

// WaitBackends waits until every backend answers through c (a minute at
// most): the first Firestore call on a fresh emulator is slow.
func WaitBackends(ctx context.Context, c *host.Clients) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Check(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backends do not answer: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
