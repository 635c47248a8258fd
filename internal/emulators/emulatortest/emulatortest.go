// Package emulatortest runs a test binary against the Google Cloud emulators
// and gives every test an isolated world in them.
//
//	func TestMain(m *testing.M) { emulatortest.Main(m) }
//
//	func TestX(t *testing.T) {
//		cfg := emulatortest.New(t)
//		// cfg points at a fresh project: its own Spanner instance and
//		// database, Bigtable tables and Pub/Sub topics, from shared/topology.
//	}
//
// The emulators isolate by project, so each world is one new project id.
package emulatortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/firestore"
	"cloud.google.com/go/spanner"
	"github.com/sethvargo/go-envconfig"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/topology"
)

// EnvLogDir names a directory that receives the emulators' output when Main
// starts them (else only the end of it is shown, when they fail to start).
const EnvLogDir = "EMULATOR_LOG_DIR"

// stack is the test binary's stack, set once by Main before any test runs.
var stack *emulators.Stack

// Main runs the tests of a package against the emulators: a stack already
// running (the four *_EMULATOR_HOST variables set) is reused, else one is
// started for the whole test binary and stopped at the end. When the emulators
// cannot be found or started, the test binary fails with the reason: tests
// that need them never silently skip.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if !flag.Parsed() {
		flag.Parse() // m.Run would too; testing.Verbose needs it now
	}
	s, ok := emulators.Attach()
	if ok {
		// Variables left over from a stack that is gone must not turn into
		// a timeout in every test.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.Ping(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: emulatortest: the emulators named by the environment do not answer (unset the *_EMULATOR_HOST variables to start a stack): %v\n", err)
			return 1
		}
	} else {
		started := time.Now()
		var err error
		s, err = emulators.Start(context.Background(), emulators.Options{LogDir: os.Getenv(EnvLogDir)})
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: emulatortest: the tests of this package need the Google Cloud emulators: %v\n", err)
			return 1
		}
		defer s.Stop()
		for k, v := range s.Env() {
			if err := os.Setenv(k, v); err != nil {
				fmt.Fprintf(os.Stderr, "FAIL: emulatortest: %v\n", err)
				return 1
			}
		}
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "emulatortest: emulators started in %v: %+v\n", time.Since(started).Round(time.Millisecond), s.Hosts)
		}
	}
	stack = s
	return m.Run()
}

// Stack returns the stack of the test binary; Main must have run.
func Stack(t testing.TB) *emulators.Stack {
	t.Helper()
	if stack == nil {
		t.Fatal("emulatortest: call emulatortest.Main(m) from TestMain of this package")
	}
	return stack
}

// Option changes the world New builds.
type Option func(*options)

type options struct {
	push       func(function string) string
	maxAgeDays int
	env        map[string]string
}

// WithPushEndpoint makes the subscriptions of event functions push to
// endpoint(functionName); without it they are pull subscriptions.
func WithPushEndpoint(endpoint func(function string) string) Option {
	return func(o *options) { o.push = endpoint }
}

// WithHistoryMaxAgeDays sets the Bigtable GC max age of the history families
// and HISTORY_MAX_AGE_DAYS in the returned config.
func WithHistoryMaxAgeDays(days int) Option {
	return func(o *options) { o.maxAgeDays = days }
}

// WithEnv sets a configuration variable (as in shared/config) of the
// returned config; the emulator and project variables cannot be overridden.
func WithEnv(name, value string) Option {
	return func(o *options) { o.env[name] = value }
}

var worlds atomic.Int64

// New provisions an isolated world for one test: a new project holding the
// Spanner instance and database, the Bigtable tables and the Pub/Sub topics
// and subscriptions of shared/topology, and Cloud Storage buckets of its own. It returns the configuration that
// points at it (defaults applied as in production) and deletes the world when
// the test ends.
func New(t testing.TB, opts ...Option) *config.Config {
	t.Helper()
	s := Stack(t)
	o := options{env: map[string]string{}}
	for _, opt := range opts {
		opt(&o)
	}
	top := topology.MustLoad()
	target := emulators.Target{
		Project:           projectID(),
		SpannerInstance:   top.Spanner.Instance,
		SpannerDatabase:   top.Spanner.Database,
		BigtableInstance:  top.Bigtable.Instance,
		PushEndpoint:      o.push,
		HistoryMaxAgeDays: o.maxAgeDays,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	env := o.env
	if o.maxAgeDays > 0 {
		env["HISTORY_MAX_AGE_DAYS"] = strconv.Itoa(o.maxAgeDays)
	}
	for k, v := range s.Env() {
		env[k] = v
	}
	env["GOOGLE_CLOUD_PROJECT"] = target.Project
	env["SPANNER_INSTANCE"] = target.SpannerInstance
	env["SPANNER_DATABASE"] = target.SpannerDatabase
	env["BIGTABLE_INSTANCE"] = target.BigtableInstance
	// Bucket names are global: each world has buckets of its own.
	for name, suffix := range bucketVars {
		if _, set := env[name]; !set {
			env[name] = target.Project + "-" + suffix
		}
	}
	cfg, err := config.FromLookuper(ctx, envconfig.MapLookuper(env))
	if err != nil {
		t.Fatalf("emulatortest.New: %v", err)
	}
	target.Buckets = cfg.Buckets()

	if err := emulators.Provision(ctx, s.Hosts, target); err != nil {
		t.Fatalf("emulatortest.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := emulators.Teardown(ctx, s.Hosts, target); err != nil {
			t.Errorf("emulatortest: teardown of %s: %v", target.Project, err)
		}
	})
	return cfg
}

// bucketVars name the variables of config.Config.Buckets, each given a
// bucket of the world's own, <project>-<suffix>.
var bucketVars = map[string]string{"EXPORTS_BUCKET": "exports", "ERASURE_LOG_BUCKET": "erasure-log"}

// projectID returns a project id unique among the test binaries sharing a
// stack: valid as a Google Cloud project id (lowercase, digits, hyphens,
// at most 30 characters).
func projectID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("t%d-%d-%s", os.Getpid(), worlds.Add(1), hex.EncodeToString(b[:]))
}

// Bigtable is a Bigtable client of cfg's world (as New returns it), closed
// when the test ends: for the stores' own tests, which sit below the function
// host that builds the clients of a deployed instance.
func Bigtable(t testing.TB, cfg *config.Config) *bigtable.Client {
	t.Helper()
	c, err := bigtable.NewClientWithConfig(context.Background(), cfg.Project, cfg.Bigtable.Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}})
	if err != nil {
		t.Fatalf("emulatortest.Bigtable: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Spanner is a Spanner client of cfg's world, closed when the test ends.
func Spanner(t testing.TB, cfg *config.Config) *spannerdb.DB {
	t.Helper()
	db, err := spannerdb.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("emulatortest.Spanner: %v", err)
	}
	t.Cleanup(db.Client.Close)
	return db
}

// SpannerCountingSQL is Spanner's client of cfg's world that also counts
// the SQL statements it sends: a test's hold on a store that must read by
// key, since the emulator runs every SQL query as a scan of its tables.
func SpannerCountingSQL(t testing.TB, cfg *config.Config) (*spannerdb.DB, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	isSQL := func(method string) bool {
		return method == "/google.spanner.v1.Spanner/ExecuteSql" || method == "/google.spanner.v1.Spanner/ExecuteStreamingSql"
	}
	opts := append(spannerdb.ClientOptions(),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if isSQL(method) {
				n.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if isSQL(method) {
				n.Add(1)
			}
			return streamer(ctx, desc, cc, method, opts...)
		})))
	c, err := spanner.NewClientWithConfig(context.Background(), cfg.DatabasePath(), spanner.ClientConfig{
		DisableNativeMetrics: true,
		DatabaseRole:         cfg.Spanner.DatabaseRole,
	}, opts...)
	if err != nil {
		t.Fatalf("emulatortest.SpannerCountingSQL: %v", err)
	}
	t.Cleanup(c.Close)
	return spannerdb.Wrap(c, cfg), &n
}

// Firestore is a Firestore client of cfg's world, closed when the test ends.
func Firestore(t testing.TB, cfg *config.Config) *firestore.Client {
	t.Helper()
	c, err := firestore.NewClientWithDatabase(context.Background(), cfg.Project, cfg.Firestore.Database)
	if err != nil {
		t.Fatalf("emulatortest.Firestore: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
