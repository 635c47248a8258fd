package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
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

	"github.com/videngage/engagement/shared/lazy"
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
// between is dropped, and each failed try is logged once. Building a Google
// exporter looks for credentials and may wait on the metadata server, so it
// is built on first use, in the background: it must neither delay nor fail a
// function's start.
const rebuildAfter = time.Minute

type shutdowner interface {
	Shutdown(ctx context.Context) error
}

// lazyExporter is an exporter built by build on first use.
func lazyExporter[T shutdowner](name string, build func(context.Context) (T, error)) *lazy.Value[T] {
	return &lazy.Value[T]{
		Name:       name,
		Build:      build,
		RetryAfter: rebuildAfter,
		Release:    func(x T) { x.Shutdown(context.Background()) },
	}
}

// shutdown shuts down the exporter of l if it was built.
func shutdown[T shutdowner](ctx context.Context, l *lazy.Value[T]) error {
	x, built := l.Close()
	if !built {
		return nil
	}
	return x.Shutdown(ctx)
}

// export runs f on the exporter, dropping the data quietly while a failed
// build waits for its next try.
func export[T shutdowner](ctx context.Context, l *lazy.Value[T], f func(T) error) error {
	v, err := l.Get(ctx)
	if errors.Is(err, lazy.ErrWaiting) {
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
	l *lazy.Value[sdktrace.SpanExporter]
}

func newLazySpanExporter(endpoint string) *lazySpanExporter {
	return &lazySpanExporter{l: lazyExporter("OTLP span exporter",
		func(ctx context.Context) (sdktrace.SpanExporter, error) {
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
		})}
}

func (e *lazySpanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	return export(ctx, e.l, func(x sdktrace.SpanExporter) error { return x.ExportSpans(ctx, spans) })
}

func (e *lazySpanExporter) Shutdown(ctx context.Context) error { return shutdown(ctx, e.l) }

// lazyMetricExporter exports metrics to Google's OTLP endpoint. Cloud
// Monitoring files each as prometheus.googleapis.com/<instrument name>/<kind>
// on a prometheus_target resource, whose location (required) comes from
// cloud.region: the build detects the platform's resource attributes (the
// metadata server gives the region) and adds them to every export.
type lazyMetricExporter struct {
	l *lazy.Value[sdkmetric.Exporter]
}

func newLazyMetricExporter(endpoint string, detect func(context.Context) (*resource.Resource, error)) *lazyMetricExporter {
	return &lazyMetricExporter{l: lazyExporter("OTLP metric exporter",
		func(ctx context.Context) (sdkmetric.Exporter, error) {
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
		})}
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
	return export(ctx, e.l, func(x sdkmetric.Exporter) error { return x.Export(ctx, rm) })
}

func (e *lazyMetricExporter) ForceFlush(ctx context.Context) error {
	if x, ok := e.l.Peek(); ok {
		return x.ForceFlush(ctx)
	}
	return nil
}

func (e *lazyMetricExporter) Shutdown(ctx context.Context) error { return shutdown(ctx, e.l) }
