package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A client's traceparent cannot make a request traced: its sampled flag is
// ignored, and so is a trace id picked to fall under the ratio's threshold.
// Its trace id is kept, for the log lines.
func TestRequestsIgnoreTheClientsSampledFlag(t *testing.T) {
	rec := useRecorderSampling(t, 0)
	var traceID string
	var sampled bool
	h := Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traceID, _, sampled = TraceIDs(r.Context())
	}))
	req := httptest.NewRequest(http.MethodGet, "/v1/counts?ids=a", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if traceID != "4bf92f3577b34da6a3ce929d0e0e4736" || sampled {
		t.Errorf("trace %s sampled %v, want the client's trace id, not sampled", traceID, sampled)
	}
	req = httptest.NewRequest(http.MethodGet, "/v1/counts?ids=a", nil)
	req.Header.Set("X-Cloud-Trace-Context", "105445aa7843bc8bf206b12000100000/1;o=1")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if sampled {
		t.Error("X-Cloud-Trace-Context o=1 made the request sampled")
	}
	if n := len(rec.spans.Ended()); n != 0 {
		t.Errorf("%d spans recorded at ratio 0", n)
	}
}

func TestRequestSamplerChoosesByChanceNotByTraceID(t *testing.T) {
	s := sampler(0.01)
	// The lowest trace id is under every ratio's threshold of TraceIDRatioBased.
	tid, _ := trace.TraceIDFromHex("00000000000000010000000000000000")
	sampled := 0
	const n = 2000
	for i := range n {
		sid, _ := trace.SpanIDFromHex(fmt.Sprintf("%016x", i+1))
		parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
		}))
		res := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: parent, TraceID: tid, Name: "GET", Kind: trace.SpanKindServer})
		if res.Decision == sdktrace.RecordAndSample {
			sampled++
		}
	}
	// 20 expected; 100 is five times that, beyond any plausible chance.
	if sampled > 100 {
		t.Errorf("%d of %d requests sampled at ratio 0.01", sampled, n)
	}
}

// A Pub/Sub consumer span follows its message's decision: the trace is
// recorded whole or not at all.
func TestConsumerSpansFollowTheirParent(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	for _, tc := range []struct {
		ratio float64
		flags trace.TraceFlags
		want  sdktrace.SamplingDecision
	}{
		{0, trace.FlagsSampled, sdktrace.RecordAndSample},
		{1, 0, sdktrace.Drop},
	} {
		parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: tc.flags, Remote: true,
		}))
		got := sampler(tc.ratio).ShouldSample(sdktrace.SamplingParameters{ParentContext: parent, TraceID: tid, Name: "m", Kind: trace.SpanKindConsumer})
		if got.Decision != tc.want {
			t.Errorf("ratio %v, parent flags %v: decision %v, want %v", tc.ratio, tc.flags, got.Decision, tc.want)
		}
	}
}
