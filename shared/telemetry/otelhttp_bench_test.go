package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// otelhttpMiddleware is Middleware rebuilt on otelhttp: otelhttp makes the
// server span; the route slot, the span's name and engagement/requests stay.
func otelhttpMiddleware(next http.Handler, opts ...otelhttp.Option) http.Handler {
	metrics, _ := NewMetrics(nil)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slot := new(atomic.Pointer[string])
		ctx := context.WithValue(r.Context(), routeKey{}, slot)
		rec := &StatusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(ctx))
		name := RouteUnmatched
		if p := slot.Load(); p != nil {
			name = *p
		}
		span := trace.SpanFromContext(ctx)
		span.SetName(name)
		span.SetAttributes(semconv.HTTPRouteKey.String(name))
		status := rec.Status
		if status == 0 {
			status = 200
		}
		metrics.Request(ctx, name, status)
	})
	return otelhttp.NewHandler(inner, "server", append(opts, otelhttp.WithPropagators(requestPropagator))...)
}

func BenchmarkServerSpan(b *testing.B) {
	prevTP, prevMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	defer func() { otel.SetTracerProvider(prevTP); otel.SetMeterProvider(prevMP) }()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler(0.1)))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetRoute(r.Context(), "GET /v1/counts")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"counts":{}}`))
	})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"hand-written", Middleware(nil)(h)}, {"otelhttp", otelhttpMiddleware(h)},
		{"otelhttp-no-metrics", otelhttpMiddleware(h, otelhttp.WithMeterProvider(noop.NewMeterProvider()))}} {
		for _, sampled := range []string{"00", "01"} {
			b.Run(c.name+"/flags-"+sampled, func(b *testing.B) {
				b.ReportAllocs()
				req := httptest.NewRequest("GET", "/v1/counts?ids=a,b", nil)
				req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-"+sampled)
				for b.Loop() {
					c.h.ServeHTTP(httptest.NewRecorder(), req)
				}
			})
		}
	}
}
