package httpx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/videngage/engagement/shared/telemetry"
)

type traceKey struct{}

type trace struct {
	id, span string
	sampled  bool
	project  string
}

var traceparentPattern = regexp.MustCompile(`^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$`)

// WithTrace stores the request's trace ids (W3C traceparent, else
// X-Cloud-Trace-Context) in ctx for the log handler.
func WithTrace(ctx context.Context, project, traceparent, cloudTrace string) context.Context {
	var t trace
	if id, span, sampled := telemetry.TraceIDs(ctx); id != "" {
		t = trace{id: id, span: span, sampled: sampled}
	} else if m := traceparentPattern.FindStringSubmatch(traceparent); m != nil && m[0][:2] != "ff" && nonZero(m[1]) && nonZero(m[2]) {
		t = trace{id: m[1], span: m[2], sampled: m[3] == "01"}
	} else if cloudTrace != "" {
		t = parseCloudTrace(cloudTrace)
	}
	if t.id == "" {
		return ctx
	}
	t.project = project
	return context.WithValue(ctx, traceKey{}, t)
}

var cloudTraceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// parseCloudTrace reads X-Cloud-Trace-Context, TRACE_ID[/SPAN_ID][;o=OPTIONS]
// with a decimal span id. Cloud Logging wants the span id as 16 hex digits;
// a header that is not of this shape (any client may send one) is ignored.
func parseCloudTrace(h string) trace {
	id, rest, _ := strings.Cut(h, "/")
	id = strings.ToLower(id)
	if !cloudTraceIDPattern.MatchString(id) || !nonZero(id) {
		return trace{}
	}
	t := trace{id: id}
	decimal, opts, _ := strings.Cut(rest, ";")
	if span, err := strconv.ParseUint(decimal, 10, 64); err == nil && span != 0 {
		t.span = fmt.Sprintf("%016x", span)
	}
	t.sampled = opts == "o=1"
	return t
}

// nonZero reports whether a hex id has a digit other than 0 (W3C and Cloud
// Trace treat all-zero ids as absent).
func nonZero(hexID string) bool { return strings.Trim(hexID, "0") != "" }

// NewLogHandler is a slog handler writing JSON that Cloud Logging reads:
// "severity" and "message" keys, and the trace fields of the context.
//
// Lines logged with a context that carries a span but no request trace (event
// functions) take the span's ids, in project.
func NewLogHandler(w io.Writer, level slog.Leveler, project string) slog.Handler {
	return &traceHandler{project: project, Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.MessageKey:
				a.Key = "message"
			case slog.LevelKey:
				a.Key = "severity"
				if l, ok := a.Value.Any().(slog.Level); ok && l == slog.LevelWarn {
					a.Value = slog.StringValue("WARNING")
				}
			case slog.TimeKey:
				a.Key = "time"
			}
			return a
		},
	})}
}

type traceHandler struct {
	slog.Handler
	project string
}

func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	t, ok := ctx.Value(traceKey{}).(trace)
	if !ok {
		if id, span, sampled := telemetry.TraceIDs(ctx); id != "" {
			t, ok = trace{id: id, span: span, sampled: sampled, project: h.project}, true
		}
	}
	if ok {
		r.AddAttrs(
			slog.String("logging.googleapis.com/trace", "projects/"+t.project+"/traces/"+t.id),
			slog.String("logging.googleapis.com/spanId", t.span),
			slog.Bool("logging.googleapis.com/trace_sampled", t.sampled),
		)
	}
	return h.Handler.Handle(ctx, r)
}

func (h *traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &traceHandler{Handler: h.Handler.WithAttrs(as), project: h.project}
}

func (h *traceHandler) WithGroup(name string) slog.Handler {
	return &traceHandler{Handler: h.Handler.WithGroup(name), project: h.project}
}
