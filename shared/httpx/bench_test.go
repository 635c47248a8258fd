package httpx

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkStandard is what the middleware every HTTP function gets costs
// per request (span, requests metric, recovery, the access log line as JSON,
// CORS, deadline), beside the bare handler: the benchmarks of cmd/bench
// serve the handlers without it.
func BenchmarkStandard(b *testing.B) {
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})))
	b.Cleanup(func() { slog.SetDefault(prev) })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", h},
		{"standard", Standard("Reactions", "p", []string{"https://example.com"}, 30*time.Second)(h)},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("PUT", "/v1/reactions/hot", nil)
			r.Header.Set("Authorization", "Bearer x")
			r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}

// TestLogLine: the access log line carries Cloud Logging's httpRequest
// fields.
func TestLogLine(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	h := Log("p")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	r := httptest.NewRequest("PUT", "/v1/reactions/hot?x=1", nil)
	r.Header.Set("User-Agent", "ua/1")
	h.ServeHTTP(httptest.NewRecorder(), r)
	var line struct {
		Msg         string `json:"msg"`
		HTTPRequest struct {
			RequestMethod, RequestURL, Latency, UserAgent string
			Status                                        int
		} `json:"httpRequest"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%s: %v", buf.Bytes(), err)
	}
	got := line.HTTPRequest
	if line.Msg != "request" || got.RequestMethod != "PUT" || got.RequestURL != "/v1/reactions/hot" || got.Status != http.StatusTeapot ||
		got.UserAgent != "ua/1" || !strings.HasSuffix(got.Latency, "s") || len(got.Latency) < len("0.000000s") {
		t.Errorf("log line %s", buf.Bytes())
	}
}
