package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/robfig/cron/v3"

	"github.com/videngage/engagement/cmd/internal/localstack"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/telemetry"
	"github.com/videngage/engagement/shared/topology"
)

const allNeeds = host.NeedSpanner | host.NeedBigtable | host.NeedPubSub | host.NeedFirestore | host.NeedVerifier | host.NeedObjects

func realMain(ctx context.Context) error {
	// Listen first: push subscriptions and /healthz need an answer as soon
	// as they exist; /healthz says 503 until everything is ready.
	ln, err := listen()
	if err != nil {
		return err
	}
	base := "http://127.0.0.1:" + envOr("PORT", "8080")
	var ready readiness
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", ready.serve)
	// Every answer, the functions' and the stack's own, carries the
	// security headers; unknown paths and bad query strings get the error
	// body, as from a deployed function.
	root := httpx.Chain(httpx.ServeMux(mux), httpx.SecurityHeaders, httpx.StrictQuery)
	srv := &http.Server{Handler: root, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("server stopped", "error", err)
		}
	}()
	defer srv.Close()

	logDir := envOr("LOCAL_LOG_DIR", filepath.Join(os.TempDir(), "engagement-local"))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	stack, err := localstack.Emulators(ctx, "local", emulators.Options{LogDir: logDir})
	if err != nil {
		return err
	}
	defer stack.Stop()

	project := envOr("GOOGLE_CLOUD_PROJECT", "local-project")
	issuer, err := newIssuer(project)
	if err != nil {
		return err
	}
	// The event functions read their configuration from the environment, as
	// in the cloud; the rest of this process uses the same values.
	env := map[string]string{
		"GOOGLE_CLOUD_PROJECT": project,
		"AUTH_AUDIENCE":        project,
		"AUTH_JWKS_URL":        base + "/dev/jwks",
		"CORS_ALLOWED_ORIGINS": envOr("CORS_ALLOWED_ORIGINS", "*"),
		// TELEMETRY_EXPORTER=stdout prints spans and metrics as JSON lines.
		"TELEMETRY_EXPORTER":     envOr("TELEMETRY_EXPORTER", "none"),
		"TELEMETRY_SAMPLE_RATIO": envOr("TELEMETRY_SAMPLE_RATIO", "1"),
		// An account erasure waits ERASURE_SETTLE (20 minutes in the cloud,
		// the span of Pub/Sub's redeliveries) before it removes the views'
		// claims; locally a short wait lets one tried from the playground
		// finish while you watch.
		"ERASURE_SETTLE": envOr("ERASURE_SETTLE", "10s"),
		// The issuer answers the account records (accounts:lookup) too, of
		// the accounts minted with an age (/dev/token?accountAge=1h).
		"FIREBASE_AUTH_EMULATOR_HOST": strings.TrimPrefix(base, "http://"),
	}
	for k, v := range stack.Env() {
		env[k] = v
	}
	for k, v := range env {
		os.Setenv(k, v)
	}
	os.Unsetenv("FUNCTION_TARGET")
	cfg, err := config.FromEnv(ctx)
	if err != nil {
		return err
	}
	shutdownTelemetry, err := telemetry.Setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTelemetry(ctx)
	}()

	// The world stays when the stack stops: the next run finds its data.
	_, err = localstack.ProvisionConfig(ctx, stack, cfg, func(fn string) string { return base + "/events/" + fn })
	if err != nil {
		return err
	}

	clients, err := host.New(ctx, cfg, allNeeds)
	if err != nil {
		return err
	}
	defer clients.Close()

	events, err := localstack.EventFunctions(nil)
	if err != nil {
		return err
	}

	// A page on another local origin gets its token as it calls the API:
	// with CORS, but for loopback origins only, so that no web site a
	// developer visits can mint tokens from their stack.
	mux.Handle("/dev/token", httpx.CORSFor(loopbackOrigin)(issuer.TokenHandler()))
	mux.Handle("GET /{$}", playgroundHandler())
	mux.Handle("GET /playground/", playgroundHandler())
	mux.Handle("GET /dev/jwks", issuer.JWKSHandler())
	mux.Handle("/identitytoolkit.googleapis.com/v1/projects/"+project+"/accounts:lookup", issuer.AccountsHandler())
	mux.Handle("POST /events/{function}", events)
	functions, err := localstack.MountHTTP(ctx, mux, clients, nil)
	if err != nil {
		return err
	}
	sched, err := startScheduler(topology.MustLoad(), functions)
	if err != nil {
		return err
	}
	defer sched.stop()

	// The first Firestore call on a fresh emulator is slow: wait for every
	// backend once, so that /healthz turning 200 means ready.
	if err := localstack.WaitBackends(ctx, clients); err != nil {
		return err
	}
	ready.set(clients)
	slog.Info("serving", "playground", base+"/", "api", base+"/v1/", "health", base+"/healthz", "tokens", base+"/dev/token?uid=alice")
	<-ctx.Done()
	slog.Info("stopping")
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

// newIssuer makes the stack's token issuer. Tests replace it to keep the
// issuer, and mint expired or wrong-audience tokens with the stack's own key.
var newIssuer = localauth.New

// listen listens on PORT of loopback, unless LOCAL_LISTEN_HOST names
// another address: the stack mints any user's token for whoever asks, so it
// is not offered to the network by default.
func listen() (net.Listener, error) {
	addr := net.JoinHostPort(envOr("LOCAL_LISTEN_HOST", "127.0.0.1"), envOr("PORT", "8080"))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (set PORT, or LOCAL_LISTEN_HOST, to use another): %w", addr, err)
	}
	return ln, nil
}

// loopbackOrigin reports whether origin is a page served from this machine.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return false
	}
	switch h := u.Hostname(); h {
	case "localhost":
		return true
	default:
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// scheduler calls the scheduled functions on their Cloud Scheduler
// schedules, in process.
type scheduler struct {
	cron *cron.Cron
	// jobs is the context of the jobs' requests and stops their runs
	// (httpx.JobStopsWith) when stopJobs ends it.
	jobs     context.Context
	stopJobs context.CancelFunc
	// atOnce are the runs started with the stack, outside cron.
	atOnce sync.WaitGroup
}

// startScheduler starts the jobs' schedules. The jobs of every minute also
// run at once: in the cloud their scheduler has been calling them all
// along, and a stack started mid-minute would otherwise fold no staged
// views (nor anything else of theirs) until the next minute.
func startScheduler(top *topology.Topology, handlers map[string]http.Handler) (*scheduler, error) {
	s := &scheduler{cron: cron.New()}
	var now []func()
	for _, job := range top.Scheduler {
		h, ok := handlers[job.Function]
		fn, _ := top.Function(job.Function)
		if !ok || len(fn.Routes) == 0 {
			return nil, fmt.Errorf("scheduler job %s: no function %s", job.Name, job.Function)
		}
		// Cloud Scheduler calls the function's URL at its route, as here.
		route := fn.Routes[0]
		body, err := json.Marshal(job.Body)
		if err != nil {
			return nil, err
		}
		name := job.Name
		run := func() {
			req := httptest.NewRequestWithContext(httpx.JobStopsWith(s.jobs, s.jobs), http.MethodPost, route, strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			slog.Info("scheduled job ran", "job", name, "status", rec.Code)
		}
		if _, err := s.cron.AddFunc(job.Schedule, run); err != nil {
			return nil, fmt.Errorf("scheduler job %s: %w", name, err)
		}
		if job.Schedule == "* * * * *" {
			now = append(now, run)
		}
	}
	s.jobs, s.stopJobs = context.WithCancel(context.Background())
	s.cron.Start()
	for _, run := range now {
		s.atOnce.Go(run)
	}
	return s, nil
}

// stop starts no more jobs, ends the running ones (httpx.JobStopsWith) and
// waits for them to return: a job cut off by the clients closing under it
// would log its work as failed.
func (s *scheduler) stop() {
	s.stopJobs()
	<-s.cron.Stop().Done()
	s.atOnce.Wait()
}

// readiness answers /healthz: 200 once every backend answers.
type readiness struct {
	mu      sync.Mutex
	clients *host.Clients
}

func (r *readiness) set(c *host.Clients) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients = c
}

func (r *readiness) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	c := r.clients
	r.mu.Unlock()
	if c == nil {
		httpx.WriteError(w, req, httpx.Unavailable(time.Second, "starting"))
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
	defer cancel()
	if err := c.Check(ctx); err != nil {
		slog.Warn("health check failed", "error", err)
		httpx.WriteError(w, req, httpx.Unavailable(time.Second, "a backend does not answer"))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
