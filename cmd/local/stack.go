package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/videngage/engagement/cmd/internal/localstack"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
)

func realMain(ctx context.Context) error {
	regions, err := regionCount()
	if err != nil {
		return err
	}
	// Listen first: push subscriptions and /healthz need an answer as soon
	// as they exist; /healthz says 503 until everything is ready.
	ln, err := listen()
	if err != nil {
		return err
	}
	base := "http://127.0.0.1:" + envOr("PORT", "8080")
	var ready localstack.Readiness
	var balancer atomic.Pointer[localstack.Balancer]
	mux := http.NewServeMux()
	root := localstack.Root(mux)
	if regions == 1 {
		mux.Handle("GET /healthz", &ready)
	} else {
		// The stack's own routes are served here; every other request,
		// /healthz included, goes to a live region, whose answer carries
		// its headers.
		own := root
		starting := httpx.SecurityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteError(w, r, httpx.Unavailable(errs.BackendUnavailable, time.Second, "starting"))
		}))
		root = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, pattern := mux.Handler(r); pattern != "" {
				own.ServeHTTP(w, r)
			} else if b := balancer.Load(); b != nil {
				b.ServeHTTP(w, r)
			} else {
				starting.ServeHTTP(w, r)
			}
		})
	}
	srv := localstack.Serve(ln, root)
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
	// in the cloud; the rest of this process, and the regions' processes,
	// use the same values.
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
		// the accounts minted with an age (/dev/token?accountAge=1h), and
		// deletes them (accounts:delete) for the erasure.
		"FIREBASE_AUTH_EMULATOR_HOST": accountsHost(base),
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
	stopTelemetry, err := localstack.StartTelemetry(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopTelemetry()

	// The world stays when the stack stops: the next run finds its data.
	_, err = localstack.ProvisionConfig(ctx, stack, cfg, func(fn string) string { return base + "/events/" + fn })
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
	mux.Handle("/identitytoolkit.googleapis.com/v1/projects/"+project+"/accounts:delete", issuer.AccountDeleteHandler())

	if regions == 1 {
		clients, err := host.New(ctx, cfg, localstack.AllNeeds)
		if err != nil {
			return err
		}
		defer clients.Close()
		instead, err := replaceFunctions(ctx, clients)
		if err != nil {
			return err
		}
		stop, err := localstack.ServeFunctions(ctx, mux, clients, instead)
		if err != nil {
			return err
		}
		defer stop()
		// The first Firestore call on a fresh emulator is slow: wait for
		// every backend once, so that /healthz turning 200 means ready.
		if err := localstack.WaitBackends(ctx, clients); err != nil {
			return err
		}
		ready.Set(clients)
	} else {
		b, stop, err := startRegions(ctx, localstack.Regions()[:regions])
		if err != nil {
			return err
		}
		defer stop()
		balancer.Store(b)
	}
	slog.Info("serving", "playground", base+"/", "api", base+"/v1/", "health", base+"/healthz", "tokens", base+"/dev/token?uid=alice")
	<-ctx.Done()
	slog.Info("stopping")
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

// regionCount reads REGIONS: 1 (the default) serves every function in this
// process; 2 runs each region in a process of its own.
func regionCount() (int, error) {
	switch v := envOr("REGIONS", "1"); v {
	case "1":
		return 1, nil
	case "2":
		return 2, nil
	default:
		return 0, fmt.Errorf("REGIONS=%q: want 1 or 2", v)
	}
}

// startRegions starts one process of this program per region
// (`local -region <name>`), each serving every function with its own
// scheduler over this process's world, and returns the balancer in front
// of them, watching their health, and the function that stops them. A
// region that dies is not restarted: killing one is the region-loss drill.
func startRegions(ctx context.Context, names []string) (*localstack.Balancer, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	children := make([]*localstack.Child, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			cmd := exec.Command(exe, "-region", name)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			children[i], errs[i] = localstack.StartChild(cmd, 2*time.Minute)
		})
	}
	wg.Wait()
	stop := func() {
		for _, c := range children {
			if c != nil {
				c.Stop(10 * time.Second)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		stop()
		return nil, nil, fmt.Errorf("start the regions: %w", err)
	}
	var backends []localstack.Backend
	for i, c := range children {
		backends = append(backends, localstack.Backend{Name: names[i], Addr: c.Addr})
		slog.Info("region started", "region", names[i], "pid", c.Cmd.Process.Pid, "addr", c.Addr)
		go func() {
			<-c.Exited
			if ctx.Err() == nil {
				slog.Warn("region exited", "region", names[i], "pid", c.Cmd.Process.Pid, "code", c.Code)
			}
		}()
	}
	b := localstack.NewBalancer(backends)
	go b.Watch(ctx)
	return b, stop, nil
}

// replaceFunctions names handlers served in place of the built ones
// (localstack.MountHTTP): none. Tests replace it to run a function on a
// clock of their own.
var replaceFunctions = func(context.Context, *host.Clients) (map[string]http.Handler, error) { return nil, nil }

// accountsHost is the address of the account records (the issuer's
// accounts:lookup and accounts:delete) the stack served at base names to
// its functions: base itself. Tests that run several stacks in one process
// replace it, since the event functions are built once per process.
var accountsHost = func(base string) string { return strings.TrimPrefix(base, "http://") }

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
