package reactionsfn_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/functions/host"
	reactionsfn "github.com/videngage/engagement/functions/reactions"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func TestMain(m *testing.M) {
	// The handler's access and error logs would bury the test output.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	emulatortest.Main(m)
}

const audience = "reactions-test"

// RSA keys are slow to make under -race: one issuer serves every test.
var issuer = sync.OnceValues(func() (*localauth.Issuer, error) { return localauth.New(audience) })

// faultyPublisher is the real counter-events publisher on the emulator,
// which a test can take down.
type faultyPublisher struct {
	next *bus.Publisher
	down atomic.Bool
	sent atomic.Int64
}

func (p *faultyPublisher) Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error) {
	if p.down.Load() {
		return "", errs.Backend("publish", status.Error(codes.Unavailable, "connection refused"))
	}
	id, err := p.next.Publish(ctx, data, attrs)
	if err == nil {
		p.sent.Add(1)
	}
	return id, err
}

// faultyLimiter is the deployed Bigtable limiter, which a test can take
// down as the adapter reports an unreachable Bigtable.
type faultyLimiter struct {
	next reactionstore.Limiter
	down atomic.Bool
}

func (l *faultyLimiter) AllowMany(ctx context.Context, users []string) ([]time.Duration, error) {
	if l.down.Load() {
		return nil, errs.Backend("ratelimit.AllowMany", status.Error(codes.Unavailable, "connection refused"))
	}
	return l.next.AllowMany(ctx, users)
}

type env struct {
	t       *testing.T
	url     string
	issuer  *localauth.Issuer
	pub     *faultyPublisher
	limiter *faultyLimiter
	metrics *sdkmetric.ManualReader
}

// newEnv deploys the Reactions function as Build does (the Spanner store,
// group commit, the Bigtable limit of perMinute, the real publisher, all on
// the emulators) behind the standard middleware, with the real token
// verifier and metrics the test reads.
func newEnv(t *testing.T, perMinute int) *env {
	t.Helper()
	return newEnvWith(t, perMinute, nil)
}

// newEnvWith is newEnv with the handler's collaborators changed by deps
// (nil: as Build wires them).
func newEnvWith(t *testing.T, perMinute int, deps func(*reactionsfn.Deps)) *env {
	t.Helper()
	is, err := issuer()
	if err != nil {
		t.Fatal(err)
	}
	cfg := emulatortest.New(t)
	ctx := context.Background()
	clients, err := host.New(ctx, cfg, host.NeedSpanner|host.NeedBigtable|host.NeedPubSub)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() { clients.Close() })
	jwks := httptest.NewServer(is.JWKSHandler())
	t.Cleanup(jwks.Close)
	verifier, err := auth.NewVerifier(ctx, config.Auth{Audience: audience, JWKSURL: jwks.URL, TokenCache: config.Defaults().Auth.TokenCache})
	if err != nil {
		t.Fatal(err)
	}
	db := spannerdb.Wrap(clients.Spanner, cfg)
	store := reactionstore.New(db)
	pub := &faultyPublisher{next: bus.NewPublisher(clients.PubSub, cfg.PubSub.CounterTopic)}
	t.Cleanup(pub.next.Stop)
	limiter := &faultyLimiter{next: ratelimit.NewBigtable(clients.Bigtable, "reactions", perMinute)}
	writer := reactionstore.NewWriter(store, pub, batch.GroupCommitOptions{Batched: true, MaxInFlight: 1}).LimitWith(limiter)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	metrics, err := telemetry.NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	d := reactionsfn.Deps{Verifier: verifier, Writer: writer, Store: store, Metrics: metrics}
	if deps != nil {
		deps(&d)
	}
	h := reactionsfn.New(d)
	// A deadline far above the default: a loaded machine must not turn slow
	// emulators into 503s.
	srv := httptest.NewServer(httpx.Standard("Reactions", cfg.Project, []string{"*"}, time.Minute)(h))
	t.Cleanup(srv.Close)
	return &env{t: t, url: srv.URL, issuer: is, pub: pub, limiter: limiter, metrics: reader}
}

// put sets user's reaction on id; every answer is checked against the
// document.
func (e *env) put(user, id, reaction string, hdr ...string) answer {
	e.t.Helper()
	tok, err := e.issuer.Mint(user)
	if err != nil {
		e.t.Fatal(err)
	}
	return answer{apitest.Request(e.t, http.MethodPut, e.url+"/v1/reactions/"+id, tok, `{"reaction":"`+reaction+`"}`, hdr...)}
}

// answer is a PUT's answer, with the checks the tests make of it.
type answer struct{ apitest.Answer }

// want fails t unless a has the status code, the ETag etag (when not "")
// and, when status is not "", the spec's error body with that status and
// reason.
func (a answer) want(t *testing.T, code int, etag, status string, reason ...errs.Reason) answer {
	t.Helper()
	a.Want(t, code, "PUT")
	if got := a.Header.Get("ETag"); etag != "" && got != etag {
		t.Errorf("ETag %q, want %q", got, etag)
	}
	if status != "" {
		if len(reason) != 1 {
			t.Fatalf("an error answer is checked with its reason")
		}
		apitest.CheckError(t, "PUT", a.Answer, code, status, reason[0])
	}
	return a
}

// etag is the answer's ETag, failing the test when it has none.
func (a answer) etag(t *testing.T) string {
	t.Helper()
	tag := a.Header.Get("ETag")
	if tag == "" {
		t.Fatal("no ETag")
	}
	return tag
}

// retryAfter is the answer's Retry-After in whole seconds, failing the test
// when it is missing or not a positive integer.
func (a answer) retryAfter(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(a.Header.Get("Retry-After"))
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q, want whole seconds ≥ 1", a.Header.Get("Retry-After"))
	}
	return n
}

// TestPutAnswers checks each answer of PUT at the HTTP level: the ETag of
// every version, 412 with the current ETag on a stale If-Match, and the
// reaction unchanged by it.
func TestPutAnswers(t *testing.T) {
	e := newEnv(t, 100)
	first := e.put("alice", "v1", "like").want(t, 200, "", "").etag(t)
	second := e.put("alice", "v1", "dislike", "If-Match", first).want(t, 200, "", "").etag(t)
	if second == first {
		t.Fatalf("a change kept the ETag %s", first)
	}
	// Another tab still holds the first version.
	stale := e.put("alice", "v1", "like", "If-Match", first).want(t, http.StatusPreconditionFailed, second, "FAILED_PRECONDITION", errs.StaleVersion)
	if !strings.Contains(string(stale.Body), `"metadata":{"currentVersion":`+second+`}`) {
		t.Errorf("412 without the current version in its ErrorInfo: %s", stale.Body)
	}
	// The refused change changed nothing: the second version is current.
	e.put("alice", "v1", "dislike").want(t, 200, second, "")
	// "none" deletes the row: version 0.
	e.put("alice", "v1", "none", "If-Match", second).want(t, 200, `"0"`, "")
	e.put("alice", "v1", "like", "If-Match", "*").want(t, 200, "", "")
	e.put("alice", "v1", "like", "If-Match", "nope").want(t, 400, "", "INVALID_ARGUMENT", errs.InvalidValue)
	e.put("alice", "v1", "like", "If-Match", first, "If-Match", second).want(t, 400, "", "INVALID_ARGUMENT", errs.RepeatedParameter)
}

// TestETagNeverRepeats: after like → none → like the new row's ETag is
// none of the old row's, so an If-Match taken before the undo (another tab,
// a retried request) is refused with 412 and changes nothing: it names a
// reaction that no longer exists.
func TestETagNeverRepeats(t *testing.T) {
	e := newEnv(t, 100)
	seen := map[string]bool{}
	old := e.put("alice", "v1", "like").want(t, 200, "", "").etag(t)
	seen[old] = true
	seen[e.put("alice", "v1", "dislike").want(t, 200, "", "").etag(t)] = true
	for range 3 {
		e.put("alice", "v1", "none").want(t, 200, `"0"`, "")
		tag := e.put("alice", "v1", "like").want(t, 200, "", "").etag(t)
		if seen[tag] {
			t.Fatalf("after an undo the new like's ETag %s repeats an earlier one (%v)", tag, seen)
		}
		seen[tag] = true
		e.put("alice", "v1", "dislike", "If-Match", old).want(t, http.StatusPreconditionFailed, tag, "FAILED_PRECONDITION", errs.StaleVersion)
		e.put("alice", "v1", "like").want(t, 200, tag, "") // unchanged by the refusal
	}
}

// undone reads the reactions taken back so far from the metrics.
func (e *env) undone() int64 {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.metrics.Collect(context.Background(), &rm); err != nil {
		e.t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricReactionsUndone {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic {
				e.t.Fatalf("%s is %T, want a counter", m.Name, m.Data)
			}
			for _, p := range sum.DataPoints {
				n += p.Value
			}
		}
	}
	return n
}

// TestUndoMetric: a like or dislike set to none counts once as undo
// traffic; a none that changes nothing, a change between like and dislike,
// a refused change and a first reaction do not.
func TestUndoMetric(t *testing.T) {
	e := newEnv(t, 100)
	for _, step := range []struct {
		user, id, reaction string
		hdr                []string
		code               int
		undone             int64
	}{
		{"alice", "v1", "like", nil, 200, 0},
		{"alice", "v1", "none", nil, 200, 1},
		{"alice", "v1", "none", nil, 200, 1},                       // nothing to take back
		{"bob", "v1", "none", nil, 200, 1},                         // never reacted
		{"bob", "v2", "dislike", nil, 200, 1},                      // a first reaction
		{"bob", "v2", "like", nil, 200, 1},                         // changed, not taken back
		{"bob", "v2", "none", []string{"If-Match", `"1"`}, 412, 1}, // refused
		{"bob", "v2", "none", nil, 200, 2},
	} {
		e.put(step.user, step.id, step.reaction, step.hdr...).Want(t, step.code, "PUT")
		if got := e.undone(); got != step.undone {
			t.Fatalf("after %s sets %s on %s: %d undone, want %d", step.user, step.reaction, step.id, got, step.undone)
		}
	}
}

// TestPutRateLimited: past the per-user limit the answer is 429 with
// Retry-After, another user is not held up, and nothing is published for
// the refused change.
func TestPutRateLimited(t *testing.T) {
	e := newEnv(t, 2)
	e.put("bob", "v1", "like").want(t, 200, "", "")
	e.put("bob", "v2", "like").want(t, 200, "", "")
	sent := e.pub.sent.Load()
	a := e.put("bob", "v3", "like").want(t, http.StatusTooManyRequests, "", "RESOURCE_EXHAUSTED", errs.RateLimited)
	if n := a.retryAfter(t); n > 60 {
		t.Errorf("Retry-After %d s, past the one-minute window", n)
	}
	if got := e.pub.sent.Load(); got != sent {
		t.Errorf("a refused change published %d messages", got-sent)
	}
	e.put("carol", "v3", "like").want(t, 200, "", "")
}

// TestPutUnavailable: with Pub/Sub down the change is recorded and
// answered as done (200) though not sent (the relay republishes
// it); the client's retry of the same request sends it at once. With the
// limiter's Bigtable down nothing is recorded: 503 with Retry-After, and the
// retry is the first change.
func TestPutUnavailable(t *testing.T) {
	e := newEnv(t, 100)
	e.pub.down.Store(true)
	sent := e.pub.sent.Load()
	tag := e.put("dave", "v1", "like").want(t, 200, "", "").etag(t)
	if got := e.pub.sent.Load(); got != sent {
		t.Errorf("Pub/Sub down, yet %d messages sent", got-sent)
	}
	e.pub.down.Store(false)
	// The retry finds the like recorded (its version) and sends its event.
	e.put("dave", "v1", "like").want(t, 200, tag, "")
	if e.pub.sent.Load() == sent {
		t.Error("the retry published nothing: the recorded like would wait for the relay")
	}

	e.limiter.down.Store(true)
	e.put("dave", "v2", "dislike").want(t, http.StatusServiceUnavailable, "", "UNAVAILABLE", errs.BackendUnavailable).retryAfter(t)
	e.limiter.down.Store(false)
	e.put("dave", "v2", "dislike").want(t, 200, "", "")
}
