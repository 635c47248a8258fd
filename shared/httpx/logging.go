package httpx

import (
	"context"
	"io"
	"log/slog"

	"github.com/videngage/engagement/shared/telemetry"
)

// NewLogHandler is a slog handler writing JSON that Cloud Logging reads:
// "severity" and "message" keys, and the trace fields (in project) of the
// span in the context: telemetry.Middleware's server span of a request,
// which continues the incoming traceparent or X-Cloud-Trace-Context (the one
// parser of them is telemetry's), or an event function's consumer span.
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
	if id, span, sampled := telemetry.TraceIDs(ctx); id != "" {
		r.AddAttrs(
			slog.String("logging.googleapis.com/trace", "projects/"+h.project+"/traces/"+id),
			slog.String("logging.googleapis.com/spanId", span),
			slog.Bool("logging.googleapis.com/trace_sampled", sampled),
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
