package telemetry

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestInjectAttributes(t *testing.T) {
	useRecorder(t)
	ctx, span := tracer().Start(context.Background(), "request")
	defer span.End()

	in := map[string]string{"kind": "counter"}
	out := InjectAttributes(ctx, in)
	if diff := cmp.Diff(map[string]string{"kind": "counter"}, in); diff != "" {
		t.Errorf("InjectAttributes changed its input (-want +got):\n%s", diff)
	}
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if out["traceparent"] != want || out["kind"] != "counter" {
		t.Errorf("attributes = %v, want kind and traceparent %s", out, want)
	}
	if got := InjectAttributes(ctx, nil); got["traceparent"] != want {
		t.Errorf("from nil attributes: %v", got)
	}

	back := trace.SpanContextFromContext(ExtractAttributes(context.Background(), out))
	if !back.IsRemote() || back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || !back.IsSampled() {
		t.Errorf("extracted %v, want the remote span %v", back, sc)
	}

	// No span, no attributes; no attributes, no parent.
	if got := InjectAttributes(context.Background(), nil); len(got) != 0 {
		t.Errorf("attributes without a span: %v", got)
	}
	for _, attrs := range []map[string]string{nil, {}, {"traceparent": "garbage"}} {
		if sc := trace.SpanContextFromContext(ExtractAttributes(context.Background(), attrs)); sc.IsValid() {
			t.Errorf("ExtractAttributes(%v) = %v, want no span context", attrs, sc)
		}
	}
}

func TestCloudTraceHeader(t *testing.T) {
	for _, tc := range []struct {
		header  string
		ok      bool
		trace   string
		span    string
		sampled bool
	}{
		{"105445aa7843bc8bf206b12000100000/1;o=1", true, "105445aa7843bc8bf206b12000100000", "0000000000000001", true},
		{"105445aa7843bc8bf206b12000100000/18446744073709551615;o=0", true, "105445aa7843bc8bf206b12000100000", "ffffffffffffffff", false},
		{"105445aa7843bc8bf206b12000100000/2706079216364085", true, "105445aa7843bc8bf206b12000100000", "00099d2a2a6cea35", false},
		{"", false, "", "", false},
		{"105445aa7843bc8bf206b12000100000", false, "", "", false},                      // no span id
		{"105445aa7843bc8bf206b12000100000/0;o=1", false, "", "", false},                // zero span id
		{"00000000000000000000000000000000/5;o=1", false, "", "", false},                // zero trace id
		{"105445aa7843bc8bf206b1200010000/5;o=1", false, "", "", false},                 // short trace id
		{"105445aa7843bc8bf206b1200010000z/5;o=1", false, "", "", false},                // not hex
		{"105445aa7843bc8bf206b12000100000/ab;o=1", false, "", "", false},               // span id not decimal
		{"105445aa7843bc8bf206b12000100000/-5;o=1", false, "", "", false},               // negative
		{"105445aa7843bc8bf206b12000100000/18446744073709551616", false, "", "", false}, // overflows 64 bits
	} {
		sc, ok := parseCloudTraceHeader(tc.header)
		if ok != tc.ok {
			t.Errorf("%q: ok %v, want %v", tc.header, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if sc.TraceID().String() != tc.trace || sc.SpanID().String() != tc.span || sc.IsSampled() != tc.sampled || !sc.IsRemote() {
			t.Errorf("%q: %s/%s sampled %v remote %v, want %s/%s sampled %v", tc.header,
				sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.IsRemote(), tc.trace, tc.span, tc.sampled)
		}
	}
}

func TestRequestPropagatorPrefersTraceparent(t *testing.T) {
	h := propagation.HeaderCarrier{}
	h.Set("X-Cloud-Trace-Context", "105445aa7843bc8bf206b12000100000/1;o=1")
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	sc := trace.SpanContextFromContext(requestPropagator.Extract(context.Background(), h))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("with both headers the parent is %v, want the traceparent's", sc)
	}
	h.Set("traceparent", "not a traceparent")
	sc = trace.SpanContextFromContext(requestPropagator.Extract(context.Background(), h))
	if sc.TraceID().String() != "105445aa7843bc8bf206b12000100000" {
		t.Errorf("with a bad traceparent the parent is %v, want X-Cloud-Trace-Context's", sc)
	}
}

func TestTraceIDs(t *testing.T) {
	if id, span, sampled := TraceIDs(context.Background()); id != "" || span != "" || sampled {
		t.Errorf("TraceIDs without a span = %q %q %v", id, span, sampled)
	}
	useRecorder(t)
	ctx, s := tracer().Start(context.Background(), "x")
	defer s.End()
	id, span, sampled := TraceIDs(ctx)
	if id != s.SpanContext().TraceID().String() || span != s.SpanContext().SpanID().String() || !sampled {
		t.Errorf("TraceIDs = %q %q %v, want the span's %v", id, span, sampled, s.SpanContext())
	}
	if len(id) != 32 || len(span) != 16 {
		t.Errorf("ids %q %q are not 32 and 16 hex digits", id, span)
	}
}
