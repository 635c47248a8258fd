package telemetry

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// copying stands for middlewares between Middleware and the router that pass
// on a copy of the request (httpx.Timeout), so r.Pattern does not come back.
func copying(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(r.Context()))
	})
}

func TestMiddlewareContinuesTraceparent(t *testing.T) {
	rec := useRecorder(t)
	var handlerTrace, handlerSpan string
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/reactions/{contentId}", func(w http.ResponseWriter, r *http.Request) {
		handlerTrace, handlerSpan, _ = TraceIDs(r.Context())
		w.WriteHeader(http.StatusCreated)
	})
	h := Middleware(nil)(mux)

	req := httptest.NewRequest(http.MethodPut, "/v1/reactions/v123", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d", w.Code)
	}

	s := rec.ended()["PUT /v1/reactions/{contentId}"]
	if s == nil {
		t.Fatalf("spans %v, want one named by the route", names(rec.spans.Ended()))
	}
	if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		s.Parent().SpanID().String() != "00f067aa0ba902b7" || !s.Parent().IsRemote() || s.SpanKind() != trace.SpanKindServer {
		t.Errorf("span trace %s parent %v kind %v, want the incoming traceparent's child", s.SpanContext().TraceID(), s.Parent(), s.SpanKind())
	}
	if handlerTrace != s.SpanContext().TraceID().String() || handlerSpan != s.SpanContext().SpanID().String() {
		t.Errorf("handler saw %s/%s, want the server span %v", handlerTrace, handlerSpan, s.SpanContext())
	}
	if got := attr(s, "http.route"); got != "PUT /v1/reactions/{contentId}" {
		t.Errorf("http.route %q", got)
	}
	if got := attr(s, "http.response.status_code"); got != "201" {
		t.Errorf("http.response.status_code %q", got)
	}
	want := map[string]int64{"route=PUT /v1/reactions/{contentId},status=201": 1}
	if diff := cmp.Diff(want, sums(t, collect(t, rec.reader)[MetricRequests])); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestMiddlewareContinuesCloudTraceContext(t *testing.T) {
	rec := useRecorder(t)
	h := Middleware(func(*http.Request) string { return "Rollup" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set("X-Cloud-Trace-Context", "105445aa7843bc8bf206b12000100000/1;o=1")
	h.ServeHTTP(httptest.NewRecorder(), req)

	s := rec.ended()["Rollup"]
	if s == nil {
		t.Fatalf("spans %v, want one named by the route function", names(rec.spans.Ended()))
	}
	if s.SpanContext().TraceID().String() != "105445aa7843bc8bf206b12000100000" || s.Parent().SpanID().String() != "0000000000000001" {
		t.Errorf("span trace %s parent %v, want the X-Cloud-Trace-Context's child", s.SpanContext().TraceID(), s.Parent())
	}
	// A handler that writes nothing answers 200.
	want := map[string]int64{"route=Rollup,status=200": 1}
	if diff := cmp.Diff(want, sums(t, collect(t, rec.reader)[MetricRequests])); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestMiddlewareRoutes(t *testing.T) {
	rec := useRecorder(t)
	// A router that names the matched route, behind a middleware that
	// copies the request.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/counts", func(w http.ResponseWriter, r *http.Request) {
		SetRoute(r.Context(), r.Pattern)
		w.Write([]byte("{}"))
	})
	mux.HandleFunc("DELETE /v1/comments/{commentId}", func(w http.ResponseWriter, r *http.Request) {
		SetRoute(r.Context(), r.Pattern)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	h := Middleware(nil)(copying(mux))
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/counts?ids=a"},
		{"GET", "/v1/counts?ids=b"},
		{"DELETE", "/v1/comments/c1"},
		{"GET", "/v1/no/such/thing/1"},
		{"GET", "/v1/no/such/thing/2"},
		{"PUT", "/v1/counts"},
	} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
	}
	want := map[string]int64{
		"route=GET /v1/counts,status=200":                  2,
		"route=DELETE /v1/comments/{commentId},status=503": 1,
		// Unmatched paths never become labels.
		"route=unmatched,status=404": 2,
		"route=unmatched,status=405": 1,
	}
	if diff := cmp.Diff(want, sums(t, collect(t, rec.reader)[MetricRequests])); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	s := rec.ended()["DELETE /v1/comments/{commentId}"]
	if s == nil || s.Status().Code != codes.Error {
		t.Errorf("a 503 span should have an error status: %+v", s)
	}
	if s := rec.ended()["GET /v1/counts"]; s == nil || s.Status().Code == codes.Error {
		t.Errorf("a 200 span should not have an error status: %+v", s)
	}
}

func TestMiddlewareAbortedRequest(t *testing.T) {
	rec := useRecorder(t)
	h := Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetRoute(r.Context(), "GET /v1/history")
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("recovered %v, want the handler's panic to go on", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/history", nil))
	}()
	if s := rec.ended()["GET /v1/history"]; s == nil || s.Status().Code != codes.Error {
		t.Errorf("aborted request span %+v, want ended with an error", s)
	}
	want := map[string]int64{"route=GET /v1/history,status=500": 1}
	if diff := cmp.Diff(want, sums(t, collect(t, rec.reader)[MetricRequests])); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestMiddlewareNewTraceAndFlush(t *testing.T) {
	rec := useRecorder(t)
	var flushed error
	h := Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("a"))
		flushed = http.NewResponseController(w).Flush()
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if flushed != nil {
		t.Errorf("Flush through the middleware: %v", flushed)
	}
	spans := rec.spans.Ended()
	if len(spans) != 1 || spans[0].Parent().IsValid() || !spans[0].SpanContext().IsSampled() {
		t.Errorf("spans %v: want one new root span", spans)
	}
	if spans[0].Name() != RouteUnmatched {
		t.Errorf("span name %q", spans[0].Name())
	}
}
