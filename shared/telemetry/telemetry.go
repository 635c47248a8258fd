// Package telemetry is the OpenTelemetry set-up of a function instance: traces
// and metrics over OTLP to Google's endpoint (Cloud Trace and Cloud
// Monitoring) in the cloud; locally, metrics kept for scraping in
// Prometheus' text format (MetricsHandler) and traces and metrics to stdout
// or nowhere; the trace context carried across HTTP and Pub/Sub; and the
// service's metrics, named in one place (Metrics).
//
// The tracer and meter providers are the process's global ones (otel.Tracer,
// otel.Meter), so that the Google Cloud client libraries, which trace through
// the global provider, add their spans to ours.
package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/videngage/engagement/shared/config"
)

// Exporter values of TELEMETRY_EXPORTER.
const (
	ExporterGCP    = "gcp"
	ExporterStdout = "stdout"
	ExporterNone   = "none"
)

// scope is the instrumentation scope of this service's spans and metrics.
const scope = "github.com/videngage/engagement"

// metricInterval is how often metrics are exported. Cloud Monitoring takes at
// most one point per time series every 5 seconds; a minute keeps the cost low.
const metricInterval = time.Minute

// flushTimeout bounds the final export on SIGTERM: Cloud Run kills the
// instance 10 seconds after it.
const flushTimeout = 5 * time.Second

// options are what tests change.
type options struct {
	stdout         io.Writer     // where "stdout" writes
	metricInterval time.Duration // how often metrics are exported
	// detect finds the platform's resource attributes for "gcp" metrics.
	detect func(context.Context) (*resource.Resource, error)
}

// Setup builds the tracer and meter providers that cfg.Telemetry asks for and
// installs them, with the W3C trace-context propagator, as the process's
// global ones. It does no network I/O: the Google exporters are built on
// their first export, off the request path, so that a function starts and
// serves whether or not Google's APIs answer (exports fail and are logged
// instead). Its only errors are bad TELEMETRY_* values.
//
// shutdown flushes what is buffered and stops the exporters; call it when
// the process stops (cmd/local), or use StartInstance, which calls it on
// SIGTERM.
func Setup(ctx context.Context, cfg *config.Config) (shutdown func(context.Context) error, err error) {
	return setup(ctx, cfg, options{stdout: os.Stdout, metricInterval: metricInterval, detect: detectGCP})
}

func setup(ctx context.Context, cfg *config.Config, o options) (func(context.Context) error, error) {
	tp, mp, scraped, err := newProviders(ctx, cfg, o)
	if err != nil {
		return nil, fmt.Errorf("telemetry.Setup: %w", err)
	}
	installMu.Lock()
	defer installMu.Unlock()
	scrape = scraped
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		// Mostly failed exports; never a reason to fail a request.
		slog.Warn("telemetry error", "error", err.Error())
	}))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	installed = true
	return func(ctx context.Context) error {
		if err := errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx)); err != nil {
			return fmt.Errorf("telemetry shutdown: %w", err)
		}
		return nil
	}, nil
}

// installed makes StartInstance a no-op once a process has its providers:
// the OpenTelemetry providers are process-wide by nature. scrape serves the
// installed provider's metrics (MetricsHandler), nil when they go over OTLP.
var (
	startMu   sync.Mutex // serialises StartInstance
	installMu sync.Mutex // guards installed and scrape
	installed bool
	scrape    http.Handler
)

// StartInstance is Setup for a deployed function, whose main belongs to the
// functions framework: it sets up telemetry once per process (later calls, and
// calls after Setup, do nothing) and flushes it when Cloud Run stops the
// instance (SIGTERM), then lets the signal end the process. Call it before
// building an instance's clients.
func StartInstance(ctx context.Context, cfg *config.Config) error {
	startMu.Lock()
	defer startMu.Unlock()
	installMu.Lock()
	done := installed
	installMu.Unlock()
	if done {
		return nil
	}
	shutdown, err := Setup(ctx, cfg)
	if err != nil {
		return err
	}
	flushOnSIGTERM(shutdown)
	return nil
}

func flushOnSIGTERM(shutdown func(context.Context) error) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	go func() {
		<-ch
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		if err := shutdown(ctx); err != nil {
			slog.Warn("telemetry: final flush failed", "error", err.Error())
		}
		cancel()
		// Hand the signal back to its default (or any other) handler.
		signal.Stop(ch)
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Signal(syscall.SIGTERM)
		}
	}()
}

// newProviders builds the providers for cfg, and the handler of the
// metrics a process keeps for scraping (nil when they go over OTLP).
func newProviders(ctx context.Context, cfg *config.Config, o options) (*sdktrace.TracerProvider, *sdkmetric.MeterProvider, http.Handler, error) {
	t := cfg.Telemetry
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		return nil, nil, nil, fmt.Errorf("TELEMETRY_SAMPLE_RATIO must be from 0 to 1, not %v", t.SampleRatio)
	}
	res := newResource(cfg)
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler(t.SampleRatio))}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	var scraped http.Handler
	switch t.Exporter {
	case ExporterNone, ExporterStdout:
		// A process that exports nothing, or only to its own output, keeps
		// its metrics for GET /metrics. With "none", spans still get ids,
		// so that trace context flows through Pub/Sub and log lines carry
		// trace ids; nothing is exported.
		r, h, err := newScrapeReader()
		if err != nil {
			return nil, nil, nil, err
		}
		mopts, scraped = append(mopts, sdkmetric.WithReader(r)), h
		if t.Exporter == ExporterStdout {
			se, me, err := newStdoutExporters(o.stdout)
			if err != nil {
				return nil, nil, nil, err
			}
			topts = append(topts, sdktrace.WithBatcher(se))
			mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(o.metricInterval))))
		}
	case ExporterGCP:
		topts = append(topts, sdktrace.WithBatcher(newLazySpanExporter(googleOTLPEndpoint)))
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(newLazyMetricExporter(googleOTLPEndpoint, o.detect), sdkmetric.WithInterval(o.metricInterval))))
	default:
		return nil, nil, nil, fmt.Errorf("TELEMETRY_EXPORTER must be %q, %q or %q, not %q", ExporterGCP, ExporterStdout, ExporterNone, t.Exporter)
	}
	mp := sdkmetric.NewMeterProvider(mopts...)
	if err := observeCPU(mp); err != nil {
		return nil, nil, nil, fmt.Errorf("CPU instrument: %w", err)
	}
	return sdktrace.NewTracerProvider(topts...), mp, scraped, nil
}

// newResource describes this instance. Cloud Monitoring files OTLP metrics
// on prometheus_target (job = service namespace/name, instance = service
// instance id), so instances never write the same time series.
func newResource(cfg *config.Config) *resource.Resource {
	attrs := []attribute.KeyValue{
		semconv.ServiceNameKey.String(ServiceName()),
		semconv.ServiceNamespaceKey.String("engagement"),
		semconv.ServiceInstanceIDKey.String(instanceID()),
		// Google's OTLP endpoint writes to this project.
		attribute.String("gcp.project_id", cfg.Project),
	}
	if rev := os.Getenv("K_REVISION"); rev != "" {
		attrs = append(attrs, semconv.ServiceVersionKey.String(rev))
	}
	if cfg.Telemetry.Exporter == ExporterGCP {
		attrs = append(attrs, semconv.CloudProviderGCP, semconv.CloudAccountIDKey.String(cfg.Project))
	}
	return resource.NewSchemaless(attrs...)
}

// ServiceName is the name of this function: its entry point (FUNCTION_TARGET)
// in Cloud Functions, the Cloud Run service (K_SERVICE), else "local".
func ServiceName() string {
	for _, k := range []string{"FUNCTION_TARGET", "K_SERVICE"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "local"
}

func instanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tracer is this service's tracer from the current global provider.
func tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(scope) }

// meterProvider returns mp, or the global provider when mp is nil.
func meterProvider(mp metric.MeterProvider) metric.MeterProvider {
	if mp == nil {
		return otel.GetMeterProvider()
	}
	return mp
}
