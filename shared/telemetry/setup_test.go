package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/videngage/engagement/shared/config"
)

// restoreGlobals puts back the global providers after a test that runs Setup.
func restoreGlobals(t *testing.T) {
	t.Helper()
	tp, mp, prop := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	logger := slog.Default()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetMeterProvider(mp)
		otel.SetTextMapPropagator(prop)
		slog.SetDefault(logger)
	})
}

func telemetryConfig(exporter string) *config.Config {
	return &config.Config{Project: "test-project", Telemetry: config.Telemetry{Exporter: exporter, SampleRatio: 1}}
}

// lockedBuffer is written by the exporters' goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// exercise records one request through the middleware and one metric, and
// returns the request's trace id as the handler saw it.
func exercise(t *testing.T) string {
	t.Helper()
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	var traceID string
	h := Middleware(func(*http.Request) string { return "GET /v1/counts" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traceID, _, _ = TraceIDs(r.Context())
		m.RateLimited(r.Context(), "reactions")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/counts", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d", w.Code)
	}
	return traceID
}

func TestSetupNone(t *testing.T) {
	restoreGlobals(t)
	shutdown, err := Setup(context.Background(), telemetryConfig(ExporterNone))
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is exported, but requests still get trace ids for the logs
	// and for the messages they publish.
	if id := exercise(t); len(id) != 32 {
		t.Errorf("trace id %q, want one even with no exporter", id)
	}
	// The metrics are kept for scraping, in Prometheus' text format.
	code, body := scrapeMetrics(t)
	for _, want := range []string{
		`engagement_requests_total{otel_scope_name="` + scope + `",otel_scope_schema_url="",otel_scope_version="",route="GET /v1/counts",status="200"} 1`,
		`engagement_rate_limited_total{kind="reactions",`,
		`engagement_cpu_seconds_total{function="local",`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET /metrics: %d lacks %s:\n%s", code, want, body)
		}
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// scrapeMetrics answers GET /metrics with MetricsHandler.
func scrapeMetrics(t *testing.T) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	MetricsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return w.Code, w.Body.String()
}

func TestSetupStdout(t *testing.T) {
	restoreGlobals(t)
	var out lockedBuffer
	shutdown, err := setup(context.Background(), telemetryConfig(ExporterStdout), options{stdout: &out, metricInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := exercise(t)
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	got := out.String()
	for _, want := range []string{id, `"Name":"GET /v1/counts"`, MetricRequests, MetricRateLimited, `"service.name"`} {
		if !strings.Contains(got, want) {
			t.Errorf("stdout lacks %s:\n%s", want, got)
		}
	}
}

// TestSetupGCPWithoutCredentials: with no credentials (and no network), a
// function starts and serves; the exporters fail softly: each failed build
// is logged, and shutdown reports it.
func TestSetupGCPWithoutCredentials(t *testing.T) {
	restoreGlobals(t)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	var logs lockedBuffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))

	start := time.Now()
	// The platform is detected as Cloud Run would be, without a metadata
	// server: what fails is the credentials.
	shutdown, err := setup(context.Background(), telemetryConfig(ExporterGCP), options{metricInterval: time.Hour, detect: fakeRegion("europe-west1")})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Setup took %v; it must not wait for Google", d)
	}
	if id := exercise(t); len(id) != 32 {
		t.Errorf("trace id %q", id)
	}
	// Metrics go over OTLP only: nothing to scrape.
	if code, _ := scrapeMetrics(t); code != http.StatusNotFound {
		t.Errorf("GET /metrics: %d, want 404", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "OTLP metric exporter: application default credentials") {
		t.Errorf("shutdown error %v, want the OTLP metric exporter's build failure", err)
	}
	if ctx.Err() != nil {
		t.Errorf("shutdown ran into its deadline")
	}
	if !strings.Contains(logs.String(), "telemetry error") || !strings.Contains(logs.String(), "OTLP span exporter") {
		t.Errorf("the failed span export was not logged:\n%s", logs.String())
	}
}

func TestSetupBadConfig(t *testing.T) {
	restoreGlobals(t)
	for _, cfg := range []*config.Config{
		telemetryConfig("otlp"),
		telemetryConfig(""),
		{Telemetry: config.Telemetry{Exporter: ExporterNone, SampleRatio: 1.5}},
		{Telemetry: config.Telemetry{Exporter: ExporterNone, SampleRatio: -0.1}},
	} {
		if _, err := Setup(context.Background(), cfg); err == nil {
			t.Errorf("Setup(%+v) succeeded", cfg.Telemetry)
		}
	}
}

func TestStartInstanceAfterSetup(t *testing.T) {
	restoreGlobals(t)
	shutdown, err := Setup(context.Background(), telemetryConfig(ExporterNone))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	tp := otel.GetTracerProvider()
	if err := StartInstance(context.Background(), telemetryConfig(ExporterStdout)); err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != tp {
		t.Error("StartInstance replaced the providers that Setup installed")
	}
}

func TestServiceName(t *testing.T) {
	t.Setenv("FUNCTION_TARGET", "")
	t.Setenv("K_SERVICE", "")
	if got := ServiceName(); got != "local" {
		t.Errorf("ServiceName() = %q without platform variables", got)
	}
	t.Setenv("K_SERVICE", "apply-counters")
	if got := ServiceName(); got != "apply-counters" {
		t.Errorf("ServiceName() = %q with K_SERVICE", got)
	}
	t.Setenv("FUNCTION_TARGET", "ApplyCounters")
	if got := ServiceName(); got != "ApplyCounters" {
		t.Errorf("ServiceName() = %q with FUNCTION_TARGET", got)
	}
}
