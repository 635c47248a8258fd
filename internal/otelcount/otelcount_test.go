package otelcount

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/videngage/engagement/shared/telemetry"
)

// Counters created on the global meter provider, before Global installs
// the reader or after, are read back by name and attribute.
func TestGlobalReadsTheServiceCounters(t *testing.T) {
	ctx := context.Background()
	early := telemetry.NewCounter(nil, telemetry.MetricSpannerRowWrites, "{row}", "")
	r := Global()
	commits := telemetry.NewCounter(nil, telemetry.MetricSpannerCommits, "{commit}", "")
	msgs := telemetry.NewCounter(nil, telemetry.MetricMessagesPublished, "{message}", "")
	rows := telemetry.NewCounter(nil, telemetry.MetricSpannerRowsRead, "{row}", "")
	bytes := telemetry.NewCounter(nil, telemetry.MetricSpannerBytesRead, "By", "")
	s0, p0 := r.Spanner(), r.Published()
	early.Add(ctx, 3, metric.WithAttributes(attribute.String(telemetry.AttrTable, "Reactions")))
	early.Add(ctx, 2, metric.WithAttributes(attribute.String(telemetry.AttrTable, "PendingDeltas")))
	commits.Add(ctx, 1)
	rows.Add(ctx, 7)
	bytes.Add(ctx, 300)
	msgs.Add(ctx, 4, metric.WithAttributes(attribute.String(telemetry.AttrTopic, "counter-events")))
	d := r.Spanner().Minus(s0)
	if d.Commits != 1 || d.RowWrites != 5 || d.Reads != 0 || d.WritesByTable["Reactions"] != 3 || d.WritesByTable["PendingDeltas"] != 2 || d.RowsRead != 7 || d.BytesRead != 300 {
		t.Errorf("Spanner moved by %+v, want 1 commit, 5 row writes (3 Reactions, 2 PendingDeltas), 7 rows and 300 bytes read", d)
	}
	if got := r.Published().Messages["counter-events"] - p0.Messages["counter-events"]; got != 4 {
		t.Errorf("messages on counter-events moved by %d, want 4", got)
	}
}
