package telemetry

import (
	"fmt"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// sampler records ratio of the traces started here. A span whose parent came
// with a Pub/Sub message (our own publishers' trace context) follows the
// parent's decision, so that a trace is recorded whole or not at all.
//
// A request's server span decides alone, whatever its remote parent says:
// the traceparent of a request is the client's to write, and a client must
// not make us record (and pay for) every trace of its requests. It keeps
// the remote trace id, so that its log lines still join the load balancer's,
// but the choice is random, not by trace id, which the client picks too.
func sampler(ratio float64) sdktrace.Sampler {
	return requestSampler{ratio: ratio, parent: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}
}

type requestSampler struct {
	ratio  float64
	parent sdktrace.Sampler
}

func (s requestSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	if !psc.IsValid() || !psc.IsRemote() || p.Kind != trace.SpanKindServer {
		return s.parent.ShouldSample(p)
	}
	decision := sdktrace.Drop
	if s.ratio >= 1 || rand.Float64() < s.ratio {
		decision = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: decision, Tracestate: psc.TraceState()}
}

func (s requestSampler) Description() string {
	return fmt.Sprintf("RequestSampler{%g, %s}", s.ratio, s.parent.Description())
}
