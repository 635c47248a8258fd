package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	mexporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/metric"
	texporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/trace"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/api/option"
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

// lazySpanExporter exports spans to Cloud Trace.
type lazySpanExporter struct {
	l lazy[sdktrace.SpanExporter]
}

func newLazySpanExporter(project string) *lazySpanExporter {
	return &lazySpanExporter{l: lazy[sdktrace.SpanExporter]{
		name: "Cloud Trace exporter",
		build: func(ctx context.Context) (sdktrace.SpanExporter, error) {
			return texporter.New(texporter.WithProjectID(project), texporter.WithContext(ctx),
				// Unless disabled, the client traces its own calls: every
				// export would make spans to export.
				texporter.WithTraceClientOptions([]option.ClientOption{option.WithTelemetryDisabled()}))
		},
	}}
}

func (e *lazySpanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	return export(ctx, &e.l, func(x sdktrace.SpanExporter) error { return x.ExportSpans(ctx, spans) })
}

func (e *lazySpanExporter) Shutdown(ctx context.Context) error { return e.l.shutdown(ctx) }

// lazyMetricExporter exports metrics to Cloud Monitoring, as
// workload.googleapis.com/<instrument name>.
type lazyMetricExporter struct {
	l lazy[sdkmetric.Exporter]
}

func newLazyMetricExporter(project string) *lazyMetricExporter {
	return &lazyMetricExporter{l: lazy[sdkmetric.Exporter]{
		name: "Cloud Monitoring exporter",
		build: func(ctx context.Context) (sdkmetric.Exporter, error) {
			return mexporter.New(mexporter.WithProjectID(project), mexporter.WithContext(ctx),
				mexporter.WithMonitoringClientOptions(option.WithTelemetryDisabled()))
		},
	}}
}

// Temporality and Aggregation are those of the Cloud Monitoring exporter
// (the SDK's defaults: cumulative sums, explicit-bucket histograms), which
// the reader needs before the exporter exists.
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
