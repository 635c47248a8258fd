package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	gcpdetector "go.opentelemetry.io/contrib/detectors/gcp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/oauth"
)

func newStdoutExporters(w io.Writer) (sdktrace.SpanExporter, sdkmetric.Exporter, error) {
	se, err := stdouttrace.New(stdouttrace.WithWriter(w))
	if err != nil {
		return nil, nil, fmt.Errorf("stdout span exporter: %w", err)
	}
	me, err := stdoutmetric.New(stdoutmetric.WithWriter(w))
	if err != nil {
		return nil, nil, fmt.Errorf("stdout metric exporter: %w", err)
	}
	return se, me, nil
}

// rebuildAfter is how long an exporter that could not be built (no
// credentials, no network) waits before the next try; what is exported in
// between is dropped, and each failed try is logged once.
const rebuildAfter = time.Minute

// errWaiting marks an export dropped while the exporter waits to be built
// again; it is not worth a log line of its own.
var errWaiting = errors.New("exporter not built; waiting to try again")

// errShutdown is the answer of an exporter after Shutdown.
var errShutdown = errors.New("exporter is shut down")

type shutdowner interface {
	Shutdown(ctx context.Context) error
}

// lazy builds an exporter on first use, in the background, and again after a
// failure (at most once per rebuildAfter). Building a Google exporter looks
// for credentials and may wait on the metadata server; it must neither delay
// nor fail a function's start.
type lazy[T shutdowner] struct {
	name  string
	build func(context.Context) (T, error)

	mu       sync.Mutex
	value    T
	built    bool
	building chan struct{} // closed when the build in flight ends
	err      error         // of the last build
	failedAt time.Time
	closed   bool
}

// get returns the exporter, building it if due; it waits for a build until
// ctx ends.
func (l *lazy[T]) get(ctx context.Context) (T, error) {
	var zero T
	l.mu.Lock()
	switch {
	case l.built:
		v := l.value
		l.mu.Unlock()
		return v, nil
	case l.closed:
		l.mu.Unlock()
		return zero, errShutdown
	}
	wait := l.building
	if wait == nil {
		if !l.failedAt.IsZero() && time.Since(l.failedAt) < rebuildAfter {
			l.mu.Unlock()
			return zero, errWaiting
		}
		wait = make(chan struct{})
		l.building = wait
		go l.run(wait)
	}
	l.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return zero, fmt.Errorf("%s: still being built: %w", l.name, ctx.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.built {
		return l.value, nil
	}
	if l.closed {
		return zero, errShutdown
	}
	return zero, l.err
}

func (l *lazy[T]) run(done chan struct{}) {
	// The exporter outlives the export that asked for it.
	v, err := l.build(context.Background())
	l.mu.Lock()
	defer close(done)
	defer l.mu.Unlock()
	l.building = nil
	switch {
	case err != nil:
		l.err = fmt.Errorf("%s: %w", l.name, err)
		l.failedAt = time.Now()
	case l.closed:
		// Shut down while it was being built: nobody will use it.
		go v.Shutdown(context.Background())
	default:
		l.value, l.built = v, true
	}
}

// peek returns the exporter if it has been built.
func (l *lazy[T]) peek() (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value, l.built
}

func (l *lazy[T]) shutdown(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	v, built := l.value, l.built
	l.built = false
	l.mu.Unlock()
	if !built {
		return nil
	}
	return v.Shutdown(ctx)
}

// export runs f on the exporter, dropping the data quietly while a failed
// build waits for its next try.
func export[T shutdowner](ctx context.Context, l *lazy[T], f func(T) error) error {
	v, err := l.get(ctx)
	if errors.Is(err, errWaiting) {
		return nil
	}
	if err != nil {
		return err
	}
	return f(v)
}

// Google's OTLP endpoint, the Telemetry API: it takes traces (Cloud Trace)
// and metrics (Cloud Monitoring, as Prometheus-style time series on the
// prometheus_target resource) over OTLP/gRPC, authorized by application
// default credentials; the resource attribute gcp.project_id names the
// project written to. The identity needs roles/telemetry.tracesWriter and
// roles/telemetry.metricsWriter (or roles/cloudtrace.agent and
// roles/monitoring.metricWriter) and the project the telemetry.googleapis.com
// API, all of which terraform/modules/engagement sets up.
const (
	googleOTLPEndpoint = "telemetry.googleapis.com:443"
	googleOTLPScope    = "https://www.googleapis.com/auth/cloud-platform"
)

// googleCredentials are the per-RPC credentials of the OTLP exporters: the
// instance's application default credentials. Finding them may wait on the
// metadata server, which is why the exporters are built lazily.
func googleCredentials(ctx context.Context) (credentials.PerRPCCredentials, error) {
	creds, err := oauth.NewApplicationDefault(ctx, googleOTLPScope)
	if err != nil {
		return nil, fmt.Errorf("application default credentials: %w", err)
	}
	return creds, nil
}

// lazySpanExporter exports spans to Google's OTLP endpoint.
type lazySpanExporter struct {
	l lazy[sdktrace.SpanExporter]
}

func newLazySpanExporter(endpoint string) *lazySpanExporter {
	return &lazySpanExporter{l: lazy[sdktrace.SpanExporter]{
		name: "OTLP span exporter",
		build: func(ctx context.Context) (sdktrace.SpanExporter, error) {
			creds, err := googleCredentials(ctx)
			if err != nil {
				return nil, err
			}
			// The exporter's own gRPC calls are not traced: the client
			// carries no OpenTelemetry handler.
			return otlptracegrpc.New(ctx,
				otlptracegrpc.WithEndpoint(endpoint),
				otlptracegrpc.WithTLSCredentials(credentials.NewClientTLSFromCert(nil, "")),
				otlptracegrpc.WithDialOption(grpc.WithPerRPCCredentials(creds)))
		},
	}}
}

func (e *lazySpanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	return export(ctx, &e.l, func(x sdktrace.SpanExporter) error { return x.ExportSpans(ctx, spans) })
}

func (e *lazySpanExporter) Shutdown(ctx context.Context) error { return e.l.shutdown(ctx) }

// lazyMetricExporter exports metrics to Google's OTLP endpoint. Cloud
// Monitoring files each as prometheus.googleapis.com/<instrument name>/<kind>
// on a prometheus_target resource, whose location (required) comes from
// cloud.region: the build detects the platform's resource attributes (the
// metadata server gives the region) and adds them to every export.
type lazyMetricExporter struct {
	l lazy[sdkmetric.Exporter]
}

func newLazyMetricExporter(endpoint string, detect func(context.Context) (*resource.Resource, error)) *lazyMetricExporter {
	return &lazyMetricExporter{l: lazy[sdkmetric.Exporter]{
		name: "OTLP metric exporter",
		build: func(ctx context.Context) (sdkmetric.Exporter, error) {
			res, err := detect(ctx)
			if err != nil {
				return nil, fmt.Errorf("detect the platform: %w", err)
			}
			if v, ok := res.Set().Value(semconv.CloudRegionKey); !ok || v.AsString() == "" {
				return nil, errors.New("detect the platform: no cloud.region, which Cloud Monitoring requires of every point")
			}
			creds, err := googleCredentials(ctx)
			if err != nil {
				return nil, err
			}
			x, err := otlpmetricgrpc.New(ctx,
				otlpmetricgrpc.WithEndpoint(endpoint),
				otlpmetricgrpc.WithTLSCredentials(credentials.NewClientTLSFromCert(nil, "")),
				otlpmetricgrpc.WithDialOption(grpc.WithPerRPCCredentials(creds)))
			if err != nil {
				return nil, err
			}
			return &withResource{Exporter: x, res: res}, nil
		},
	}}
}

// detectGCP detects where the instance runs (Cloud Run, Cloud Functions,
// GCE…): region, platform, instance. It asks the metadata server.
func detectGCP(ctx context.Context) (*resource.Resource, error) {
	return resource.New(ctx, resource.WithDetectors(gcpdetector.NewDetector()))
}

// withResource adds attributes to the resource of every export.
type withResource struct {
	sdkmetric.Exporter
	res *resource.Resource
}

func (w *withResource) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	merged, err := resource.Merge(rm.Resource, w.res)
	if err != nil {
		return fmt.Errorf("metric resource: %w", err)
	}
	cp := *rm
	cp.Resource = merged
	return w.Exporter.Export(ctx, &cp)
}

// Temporality and Aggregation are those of the OTLP exporter's defaults
// (the SDK's: cumulative sums, explicit-bucket histograms), which the reader
// needs before the exporter exists.
func (e *lazyMetricExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}

func (e *lazyMetricExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

func (e *lazyMetricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	return export(ctx, &e.l, func(x sdkmetric.Exporter) error { return x.Export(ctx, rm) })
}

func (e *lazyMetricExporter) ForceFlush(ctx context.Context) error {
	if x, ok := e.l.peek(); ok {
		return x.ForceFlush(ctx)
	}
	return nil
}

func (e *lazyMetricExporter) Shutdown(ctx context.Context) error { return e.l.shutdown(ctx) }
