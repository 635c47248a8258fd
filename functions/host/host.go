// Package host is the Cloud Functions host every function package stands on,
// not a function itself: it builds the Google Cloud clients of a function
// instance from its configuration, registers functions with
// functions-framework-go so that the clients are built once per instance, on
// first use, and built again on the next request if building failed (never a
// start-up failure cached forever), and checks the clients' health.
package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/lazy"
	"github.com/videngage/engagement/shared/objects"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

// Needs says which clients a function uses; an instance builds only those.
type Needs uint8

const (
	NeedSpanner Needs = 1 << iota
	NeedBigtable
	NeedPubSub
	NeedFirestore
	NeedVerifier
	NeedObjects
)

// Clients are the clients of one function instance.
type Clients struct {
	Config    *config.Config
	Spanner   *spanner.Client
	Bigtable  *bigtable.Client
	PubSub    *pubsub.Client
	Firestore *firestore.Client
	Verifier  *auth.Verifier
	Objects   *objects.Client
	Metrics   *telemetry.Metrics

	// BigtableTx is the client for single-row transactions (the rate
	// limiter): config.Bigtable.TransactionalAppProfile, or Bigtable itself
	// when that is empty.
	BigtableTx *bigtable.Client
}

// New builds the clients named by needs.
func New(ctx context.Context, cfg *config.Config, needs Needs) (_ *Clients, err error) {
	c := &Clients{Config: cfg}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.Metrics, err = telemetry.NewMetrics(nil); err != nil {
		return nil, fmt.Errorf("host.New: metrics: %w", err)
	}
	if needs&NeedSpanner != 0 {
		c.Spanner, err = spanner.NewClientWithConfig(ctx, cfg.DatabasePath(), spanner.ClientConfig{
			// The emulator has no Cloud Monitoring to export to.
			DisableNativeMetrics: cfg.Spanner.EmulatorHost != "",
			// The function's own role: its identity may assume no other.
			DatabaseRole: cfg.Spanner.DatabaseRole,
		}, spannerdb.ClientOptions()...)
		if err != nil {
			return nil, fmt.Errorf("host.New: spanner: %w", err)
		}
	}
	if needs&NeedBigtable != 0 {
		btc := bigtable.ClientConfig{AppProfile: cfg.Bigtable.AppProfile}
		if cfg.Bigtable.EmulatorHost != "" {
			btc.MetricsProvider = bigtable.NoopMetricsProvider{}
		}
		c.Bigtable, err = bigtable.NewClientWithConfig(ctx, cfg.Project, cfg.Bigtable.Instance, btc)
		if err != nil {
			return nil, fmt.Errorf("host.New: bigtable: %w", err)
		}
		c.BigtableTx = c.Bigtable
		if p := cfg.Bigtable.TransactionalAppProfile; p != "" && p != cfg.Bigtable.AppProfile {
			btc.AppProfile = p
			c.BigtableTx, err = bigtable.NewClientWithConfig(ctx, cfg.Project, cfg.Bigtable.Instance, btc)
			if err != nil {
				return nil, fmt.Errorf("host.New: bigtable (transactional profile): %w", err)
			}
		}
	}
	if needs&NeedPubSub != 0 {
		c.PubSub, err = pubsub.NewClient(ctx, cfg.Project)
		if err != nil {
			return nil, fmt.Errorf("host.New: pubsub: %w", err)
		}
	}
	if needs&NeedFirestore != 0 {
		c.Firestore, err = firestore.NewClientWithDatabase(ctx, cfg.Project, cfg.Firestore.Database)
		if err != nil {
			return nil, fmt.Errorf("host.New: firestore: %w", err)
		}
	}
	if needs&NeedObjects != 0 {
		c.Objects, err = objects.New(ctx, cfg.Objects)
		if err != nil {
			return nil, fmt.Errorf("host.New: %w", err)
		}
	}
	if needs&NeedVerifier != 0 {
		c.Verifier, err = auth.NewVerifier(ctx, cfg.Auth)
		if err != nil {
			return nil, fmt.Errorf("host.New: verifier: %w", err)
		}
	}
	return c, nil
}

// Close closes every client that was built.
func (c *Clients) Close() error {
	var errs []error
	if c.Spanner != nil {
		c.Spanner.Close()
	}
	if c.Bigtable != nil {
		errs = append(errs, c.Bigtable.Close())
	}
	if c.BigtableTx != nil && c.BigtableTx != c.Bigtable {
		errs = append(errs, c.BigtableTx.Close())
	}
	if c.PubSub != nil {
		errs = append(errs, c.PubSub.Close())
	}
	if c.Firestore != nil {
		errs = append(errs, c.Firestore.Close())
	}
	if c.Objects != nil {
		errs = append(errs, c.Objects.Close())
	}
	return errors.Join(errs...)
}

// HTTPBuilder builds an HTTP function's handler from the instance's clients.
type HTTPBuilder func(ctx context.Context, c *Clients) (http.Handler, error)

// PushBuilder builds an event function's handler of Pub/Sub pushes (Push)
// from the instance's clients.
type PushBuilder func(ctx context.Context, c *Clients) (http.Handler, error)

// DeployCheck returns what makes a deployed instance's configuration unsafe
// for one function, beyond what every instance is checked for
// (config.Config.CheckDeployed); nil when nothing does.
type DeployCheck func(*config.Config) error

// Registered is one function as registered by its package.
type Registered struct {
	Name   string
	Needs  Needs
	HTTP   HTTPBuilder
	Push   PushBuilder
	Checks []DeployCheck
}

var (
	regMu      sync.Mutex
	registered = map[string]Registered{}
)

// RegisterHTTP registers an HTTP function (public or scheduled) with
// functions-framework-go under name. Call it from the package's init.
func RegisterHTTP(name string, needs Needs, build HTTPBuilder) {
	remember(Registered{Name: name, Needs: needs, HTTP: build})
	functions.HTTP(name, httpEntry(needs, func(ctx context.Context, c *Clients) (http.Handler, error) {
		h, err := build(ctx, c)
		if err != nil {
			return nil, err
		}
		cfg := c.Config
		return httpx.Standard(name, cfg.Project, cfg.HTTP.AllowedOrigins, cfg.HTTP.RequestTimeout)(h), nil
	}))
}

// httpEntry is the entry point of an HTTP function: its handler, built on
// first use. The answer of a failed build (503) carries the security
// headers too, as every answer does.
func httpEntry(needs Needs, build HTTPBuilder) func(http.ResponseWriter, *http.Request) {
	l := onFirstUse(needs, build)
	return httpx.SecurityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, err := l.Get(r.Context())
		if err != nil {
			httpx.WriteError(w, r, errs.Unavailable("building the handler", err))
			return
		}
		h.ServeHTTP(w, r)
	})).ServeHTTP
}

// RegisterPush registers an event function, the HTTP function a Pub/Sub
// push subscription delivers to, with functions-framework-go under name.
// Call it from the package's init. A failed client build answers 503, so
// Pub/Sub redelivers. checks hold a deployed instance to settings only this
// function reads (CheckDeployed).
func RegisterPush(name string, needs Needs, build PushBuilder, checks ...DeployCheck) {
	remember(Registered{Name: name, Needs: needs, Push: build, Checks: checks})
	l := onFirstUse(needs, build)
	functions.HTTP(name, func(w http.ResponseWriter, r *http.Request) {
		h, err := l.Get(r.Context())
		if err != nil {
			httpx.WriteError(w, r, errs.Unavailable(name+": building the handler", err))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func remember(r Registered) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registered[r.Name]; dup {
		panic("host: function registered twice: " + r.Name)
	}
	registered[r.Name] = r
}

// All returns every registered function, by name.
func All() []Registered {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]Registered, 0, len(registered))
	for _, r := range registered {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// onFirstUse is a value built by build on first use, with the instance's
// clients (those needs names) and telemetry, and built again on the next use
// if building failed.
func onFirstUse[T any](needs Needs, build func(context.Context, *Clients) (T, error)) *lazy.Value[T] {
	return &lazy.Value[T]{Build: func(ctx context.Context) (T, error) {
		var zero T
		cfg, err := config.FromEnv(ctx)
		if err != nil {
			return zero, err
		}
		if err := telemetry.StartInstance(ctx, cfg); err != nil {
			return zero, err
		}
		c, err := New(ctx, cfg, needs)
		if err != nil {
			return zero, err
		}
		v, err := build(ctx, c)
		if err != nil {
			c.Close()
			return zero, err
		}
		return v, nil
	}}
}

// Check reports whether every client that was built answers: the readiness
// of the instance (GET /healthz locally).
func (c *Clients) Check(ctx context.Context) error {
	var errs []error
	if c.Spanner != nil {
		iter := c.Spanner.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"})
		if err := iter.Do(func(*spanner.Row) error { return nil }); err != nil {
			errs = append(errs, fmt.Errorf("spanner: %w", err))
		}
	}
	if c.Bigtable != nil {
		// Any table of the topology answers; a missing row is an empty answer.
		if _, err := c.Bigtable.Open("watch_latest").ReadRow(ctx, "healthz"); err != nil {
			errs = append(errs, fmt.Errorf("bigtable: %w", err))
		}
	}
	if c.PubSub != nil {
		topic := "projects/" + c.Config.Project + "/topics/" + c.Config.PubSub.HistoryTopic
		if _, err := c.PubSub.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic}); err != nil {
			errs = append(errs, fmt.Errorf("pubsub: %w", err))
		}
	}
	if c.Firestore != nil {
		_, err := c.Firestore.Collection("healthz").Doc("healthz").Get(ctx)
		if err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, fmt.Errorf("firestore: %w", err))
		}
	}
	if c.Objects != nil {
		// Listing needs only the objects' permissions the functions hold;
		// the erasure log's writer may create objects and nothing else, so
		// that bucket has no probe.
		for _, b := range c.Config.Buckets() {
			if b == c.Config.Erasure.LogBucket {
				continue
			}
			if _, err := c.Objects.Bucket(b).List(ctx, "healthz/"); err != nil {
				errs = append(errs, fmt.Errorf("storage: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// CheckDeployed returns what makes this process unsafe to serve, when it is
// a deployed instance (config.Deployed); nil otherwise. The function it
// serves is FUNCTION_TARGET (set by Cloud Functions); one that verifies ID
// tokens serves the public API and is held to its settings too.
func CheckDeployed(ctx context.Context, lookup func(string) (string, bool)) error {
	if !config.Deployed(lookup) {
		return nil
	}
	cfg, err := config.FromLookuper(ctx, envLookuper(lookup))
	if err != nil {
		return err
	}
	target, _ := lookup("FUNCTION_TARGET")
	regMu.Lock()
	r, known := registered[target]
	regMu.Unlock()
	// An unknown or missing target is held to every check.
	errs := []error{cfg.CheckDeployed(!known || r.Needs&NeedVerifier != 0)}
	if !known {
		for _, reg := range All() {
			for _, check := range reg.Checks {
				errs = append(errs, check(cfg))
			}
		}
	}
	for _, check := range r.Checks {
		errs = append(errs, check(cfg))
	}
	return errors.Join(errs...)
}

type envLookuper func(string) (string, bool)

func (l envLookuper) Lookup(key string) (string, bool) { return l(key) }
