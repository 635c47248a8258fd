package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// RouteUnmatched is the route of a request that matched no route: the route
// label never holds a raw path, whose values are unbounded.
const RouteUnmatched = "unmatched"

type routeKey struct{}

// SetRoute names the route of the request of ctx (a ServeMux pattern such as
// "PUT /v1/reactions/{contentId}") for its span and its requests metric. A
// router calls it once it has matched the request; outside Middleware it
// does nothing.
func SetRoute(ctx context.Context, route string) {
	if slot, ok := ctx.Value(routeKey{}).(*atomic.Pointer[string]); ok {
		slot.Store(&route)
	}
}

// Middleware traces each request in a server span, continuing the trace of
// an incoming traceparent (else X-Cloud-Trace-Context) but never its
// sampling decision (sampler), and counts it in
// engagement/requests by route and status. Put it outermost, so that the
// span covers the whole answer and the handlers' contexts (and log lines)
// carry it.
//
// The route is, in order: what the handler passed to SetRoute, route(r) when
// route is not nil, the ServeMux pattern of r (set when a ServeMux serves r
// itself, not a copy), else RouteUnmatched. route runs after the handler.
func Middleware(route func(*http.Request) string) func(http.Handler) http.Handler {
	metrics, err := NewMetrics(nil)
	if err != nil {
		// The names are constants that the tests create: not expected.
		slog.Error("telemetry: requests metric unavailable", "error", err.Error())
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := requestPropagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer().Start(ctx, r.Method,
				trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(
					semconv.HTTPRequestMethodKey.String(r.Method),
					semconv.URLPathKey.String(r.URL.Path),
				))
			slot := new(atomic.Pointer[string])
			ctx = context.WithValue(ctx, routeKey{}, slot)
			rec := &StatusRecorder{ResponseWriter: w}
			r = r.WithContext(ctx)
			done := false
			defer func() {
				status := rec.Status
				switch {
				case !done:
					// The handler panicked (http.ErrAbortHandler, or no
					// recovery inside): the client gets no proper answer.
					status = http.StatusInternalServerError
				case status == 0:
					status = http.StatusOK
				}
				name := RouteUnmatched
				if p := slot.Load(); p != nil && *p != "" {
					name = *p
				} else if v := routeOf(route, r); v != "" {
					name = v
				} else if r.Pattern != "" {
					name = r.Pattern
				}
				span.SetName(name)
				span.SetAttributes(semconv.HTTPRouteKey.String(name), semconv.HTTPResponseStatusCodeKey.Int(status))
				if status >= 500 {
					span.SetStatus(codes.Error, http.StatusText(status))
				}
				span.End()
				metrics.Request(ctx, name, status)
			}()
			next.ServeHTTP(rec, r)
			done = true
		})
	}
}

func routeOf(route func(*http.Request) string, r *http.Request) string {
	if route == nil {
		return ""
	}
	return route(r)
}

// StatusRecorder remembers the final status a handler answered: the first
// WriteHeader of 200 or above (1xx are interim), else 200 at the first Write;
// 0 while the handler has answered nothing. The access log and the request
// span both read it.
type StatusRecorder struct {
	http.ResponseWriter
	Status int
}

func (s *StatusRecorder) WriteHeader(code int) {
	if s.Status == 0 && code >= 200 {
		s.Status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *StatusRecorder) Write(b []byte) (int, error) {
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's Flush and deadlines.
func (s *StatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
