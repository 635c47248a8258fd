package telemetry

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// messagePropagator carries trace context in Pub/Sub message attributes as
// W3C "traceparent" and "tracestate".
var messagePropagator = propagation.TraceContext{}

// requestPropagator reads the trace context of an incoming request: W3C
// traceparent, else Google's X-Cloud-Trace-Context (older load balancers and
// Cloud Scheduler send only that one).
var requestPropagator = propagation.NewCompositeTextMapPropagator(cloudTraceHeader{}, propagation.TraceContext{})

// InjectAttributes returns attrs plus the trace context of ctx as
// "traceparent" (and "tracestate") attributes of an outgoing Pub/Sub
// message. attrs itself is not changed; it may be nil.
func InjectAttributes(ctx context.Context, attrs map[string]string) map[string]string {
	out := make(map[string]string, len(attrs)+2)
	maps.Copy(out, attrs)
	messagePropagator.Inject(ctx, propagation.MapCarrier(out))
	return out
}

// ExtractAttributes returns ctx with the trace context carried by a Pub/Sub
// message's attributes as its remote parent. Attributes without one leave
// ctx as it is.
func ExtractAttributes(ctx context.Context, attrs map[string]string) context.Context {
	return messagePropagator.Extract(ctx, propagation.MapCarrier(attrs))
}

// TraceIDs are the ids of the span in ctx, for log lines (Cloud Logging's
// logging.googleapis.com/trace, spanId and trace_sampled fields). They are
// empty when ctx holds no span.
func TraceIDs(ctx context.Context) (traceID, spanID string, sampled bool) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", "", false
	}
	return sc.TraceID().String(), sc.SpanID().String(), sc.IsSampled()
}

// cloudTraceHeader reads X-Cloud-Trace-Context: "TRACE_ID/SPAN_ID;o=1", with
// a hexadecimal trace id and a decimal span id. It writes nothing: outgoing
// trace context is W3C.
type cloudTraceHeader struct{}

const cloudTraceHeaderName = "X-Cloud-Trace-Context"

func (cloudTraceHeader) Inject(context.Context, propagation.TextMapCarrier) {}

func (cloudTraceHeader) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	sc, ok := parseCloudTraceHeader(carrier.Get(cloudTraceHeaderName))
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

func (cloudTraceHeader) Fields() []string { return []string{cloudTraceHeaderName} }

func parseCloudTraceHeader(h string) (trace.SpanContext, bool) {
	ids, opts, _ := strings.Cut(h, ";")
	tid, sid, ok := strings.Cut(ids, "/")
	if !ok || len(tid) != 32 {
		return trace.SpanContext{}, false
	}
	var cfg trace.SpanContextConfig
	if _, err := hex.Decode(cfg.TraceID[:], []byte(tid)); err != nil {
		return trace.SpanContext{}, false
	}
	n, err := strconv.ParseUint(sid, 10, 64)
	if err != nil {
		return trace.SpanContext{}, false
	}
	binary.BigEndian.PutUint64(cfg.SpanID[:], n)
	if opts == "o=1" {
		cfg.TraceFlags = trace.FlagsSampled
	}
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}
