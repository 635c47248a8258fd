package localstack

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/telemetry"
	"github.com/videngage/engagement/shared/topology"
)

// AllNeeds are the clients of every function.
const AllNeeds = host.NeedSpanner | host.NeedBigtable | host.NeedPubSub | host.NeedFirestore | host.NeedVerifier | host.NeedObjects

// Regions names the local stack's regions when it runs two (REGIONS=2), as
// prod's two.
func Regions() []string { return []string{"us-central1", "us-east1"} }

// ServeFunctions serves every function of the system on mux over c: the
// HTTP and scheduled functions at their topology routes (MountHTTP), the
// event functions at POST /events/{function} (EventFunctions, once per
// process), and starts the local scheduler calling the scheduled ones.
// It serves the process's metrics at GET /metrics. instead names handlers
// to serve in place of the built ones (MountHTTP). stop stops the scheduler.
func ServeFunctions(ctx context.Context, mux *http.ServeMux, c *host.Clients, instead map[string]http.Handler) (stop func(), err error) {
	events, err := EventFunctions(nil)
	if err != nil {
		return nil, err
	}
	mux.Handle("POST /events/{function}", events)
	mux.Handle("GET /metrics", telemetry.MetricsHandler())
	handlers, err := MountHTTP(ctx, mux, c, instead)
	if err != nil {
		return nil, err
	}
	sched, err := StartScheduler(topology.MustLoad(), handlers)
	if err != nil {
		return nil, err
	}
	return sched.Stop, nil
}

// ServeRegion is one region of the local stack, the whole of a region
// process: every function (ServeFunctions) with its own scheduler, and
// /healthz, on a free loopback port, configured from the environment
// (config.FromEnv) over a world its parent provisioned. Once every backend
// answers it reports its address to its parent (ChildReady); it serves
// until ctx ends.
func ServeRegion(ctx context.Context) error {
	ctx, cancel := ParentGone(ctx)
	defer cancel()
	cfg, err := config.FromEnv(ctx)
	if err != nil {
		return err
	}
	stopTelemetry, err := StartTelemetry(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var ready Readiness
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", &ready)
	srv := Serve(ln, Root(mux))
	defer srv.Close()

	clients, err := host.New(ctx, cfg, AllNeeds)
	if err != nil {
		return err
	}
	defer clients.Close()
	stop, err := ServeFunctions(ctx, mux, clients, nil)
	if err != nil {
		return err
	}
	defer stop()
	if err := WaitBackends(ctx, clients); err != nil {
		return err
	}
	ready.Set(clients)
	if err := ChildReady(ln.Addr().String()); err != nil {
		return err
	}
	slog.Info("region serving", "addr", ln.Addr().String())
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

// Readiness answers /healthz: 200 once every backend answers.
type Readiness struct {
	mu      sync.Mutex
	clients *host.Clients
}

// Set makes /healthz check c's backends.
func (r *Readiness) Set(c *host.Clients) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients = c
}

func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	c := r.clients
	r.mu.Unlock()
	if c == nil {
		httpx.WriteError(w, req, httpx.Unavailable(errs.BackendUnavailable, time.Second, "starting"))
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
	defer cancel()
	if err := c.Check(ctx); err != nil {
		slog.Warn("health check failed", "error", err)
		httpx.WriteError(w, req, httpx.Unavailable(errs.BackendUnavailable, time.Second, "a backend does not answer"))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Root is mux as the local stack serves it: every answer, the functions'
// and the stack's own, carries the security headers, and unknown paths and
// bad query strings get the error body, as from a deployed function.
func Root(mux *http.ServeMux) http.Handler {
	return httpx.Chain(httpx.ServeMux(mux), httpx.SecurityHeaders, httpx.StrictQuery)
}

// Serve serves h on ln until the returned server is closed or shut down.
func Serve(ln net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("server stopped", "error", err)
		}
	}()
	return srv
}

// StartTelemetry sets up the process's telemetry from cfg and returns the
// function that flushes and stops it, waiting 5 s at most.
func StartTelemetry(ctx context.Context, cfg *config.Config) (stop func(), err error) {
	shutdown, err := telemetry.Setup(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(ctx)
	}, nil
}
