package httpx

import (
	"context"
	"io"
	"log/slog"
	"regexp"
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
	} else if m := traceparentPattern.FindStringSubmatch(traceparent); m != nil {
		t = trace{id: m[1], span: m[2], sampled: m[3] == "01"}
	} else if cloudTrace != "" {
		id, rest, _ := strings.Cut(cloudTrace, "/")
		span, opts, _ := strings.Cut(rest, ";")
		t = trace{id: id, span: span, sampled: opts == "o=1"}
	}
	if t.id == "" {
		return ctx
	}
	t.project = project
	return context.WithValue(ctx, traceKey{}, t)
}

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
