package telemetry

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func newTestMetrics(t *testing.T) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := NewMetrics(mp)
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	return m, reader
}

func TestMetricsCounters(t *testing.T) {
	m, reader := newTestMetrics(t)
	ctx := context.Background()
	m.Request(ctx, "PUT /v1/reactions/{contentId}", 200)
	m.Request(ctx, "PUT /v1/reactions/{contentId}", 200)
	m.Request(ctx, "PUT /v1/reactions/{contentId}", 429)
	m.Request(ctx, RouteUnmatched, 404)
	m.EventsApplied(ctx, "ApplyCounters", 7)
	m.EventsApplied(ctx, "ApplyCounters", 3)
	m.EventsApplied(ctx, "ApplyHistory", 1)
	m.EventsApplied(ctx, "ApplyHistory", -1) // ignored: counters only grow
	m.EventsDuplicate(ctx, "ApplyCounters", 2)
	m.EventsDuplicate(ctx, "ApplyCounters", 0)
	m.DeadLetterDelivery(ctx, "ApplyHistory")
	m.DeadLetterDelivery(ctx, "ApplyHistory")
	m.RateLimited(ctx, "reactions")
	m.RateLimited(ctx, "comments")
	m.RateLimited(ctx, "comments")
	m.RateLimitDegraded(ctx, "history", 1)
	m.RateLimitDegraded(ctx, "reactions", 5)
	m.RateLimitDegraded(ctx, "reactions", 0) // nothing decided
	m.ReconcileCorrection(ctx, "likes", -3)
	m.ReconcileCorrection(ctx, "likes", 2)
	m.ReconcileCorrection(ctx, "comments", 1)
	m.ReconcileCorrection(ctx, "comments", 0) // no correction
	m.ReactionUndone(ctx)
	m.ReactionUndone(ctx)
	m.DetectionSkipped(ctx, "step", 1)
	m.DetectionSkipped(ctx, "cluster", 2)
	m.DetectionSkipped(ctx, "cluster", 0) // nothing skipped

	got := collect(t, reader)
	want := map[string]map[string]int64{
		MetricRequests: {
			"route=PUT /v1/reactions/{contentId},status=200": 2,
			"route=PUT /v1/reactions/{contentId},status=429": 1,
			"route=unmatched,status=404":                     1,
		},
		MetricEventsApplied:        {"consumer=ApplyCounters": 10, "consumer=ApplyHistory": 1},
		MetricEventsDuplicate:      {"consumer=ApplyCounters": 2},
		MetricDeadLetterDeliveries: {"consumer=ApplyHistory": 2},
		MetricRateLimited:          {"kind=reactions": 1, "kind=comments": 2},
		MetricRateLimitDegraded:    {"kind=history": 1, "kind=reactions": 5},
		MetricReconcileCorrections: {"field=likes": 2, "field=comments": 1},
		MetricReactionsUndone:      {"": 2},
		MetricDetectionSkipped:     {"kind=step": 1, "kind=cluster": 2},
	}
	for name, points := range want {
		if diff := cmp.Diff(points, sums(t, got[name])); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// histogram returns count, sum and bucket counts by attributes.
type histPoint struct {
	Count  uint64
	Sum    float64
	Bounds []float64
}

func histograms(t *testing.T, m metricdata.Metrics) map[string]histPoint {
	t.Helper()
	out := map[string]histPoint{}
	switch h := m.Data.(type) {
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			out[attrsString(p.Attributes)] = histPoint{p.Count, float64(p.Sum), p.Bounds}
		}
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			out[attrsString(p.Attributes)] = histPoint{p.Count, p.Sum, p.Bounds}
		}
	default:
		t.Fatalf("%s is %T, want a histogram", m.Name, m.Data)
	}
	return out
}

func TestMetricsHistogramsAndGauge(t *testing.T) {
	m, reader := newTestMetrics(t)
	ctx := context.Background()
	m.BatchSize(ctx, "ApplyCounters", 500)
	m.BatchSize(ctx, "ApplyCounters", 20)
	m.BatchSize(ctx, "ApplyHistory", 1)
	m.CounterShards(ctx, 4)
	m.CounterShards(ctx, 64)
	m.RollupDuration(ctx, 250*time.Millisecond)
	m.RollupDuration(ctx, 750*time.Millisecond)
	m.ReconcileCorrection(ctx, "likes", -30)
	m.ReconcileCorrection(ctx, "likes", 12)
	m.RollupLag(ctx, 9*time.Second)
	m.RollupLag(ctx, 1500*time.Millisecond) // a gauge keeps the last value
	m.RollupLag(ctx, -time.Second)          // clock skew reads as no lag
	m.RollupLag(ctx, 2*time.Second)

	got := collect(t, reader)
	type summary struct {
		Count uint64
		Sum   float64
	}
	want := map[string]map[string]summary{
		MetricBatchSize:               {"consumer=ApplyCounters": {2, 520}, "consumer=ApplyHistory": {1, 1}},
		MetricCounterShards:           {"": {2, 68}},
		MetricRollupDuration:          {"": {2, 1}},
		MetricReconcileCorrectionSize: {"field=likes": {2, 42}},
	}
	for name, points := range want {
		h := histograms(t, got[name])
		gotSum := map[string]summary{}
		for k, p := range h {
			gotSum[k] = summary{p.Count, p.Sum}
			if len(p.Bounds) == 0 {
				t.Errorf("%s{%s} has no explicit buckets", name, k)
			}
		}
		if diff := cmp.Diff(points, gotSum); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if b := histograms(t, got[MetricCounterShards])[""].Bounds; !cmp.Equal(b, []float64{4, 8, 16, 32, 64}) {
		t.Errorf("counter_shards buckets = %v, want the shard counts 4..64", b)
	}

	g, ok := got[MetricRollupLag].Data.(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("%s is %T, want a float64 gauge (the alert policy aligns it with ALIGN_MAX)", MetricRollupLag, got[MetricRollupLag].Data)
	}
	if len(g.DataPoints) != 1 || g.DataPoints[0].Value != 2 {
		t.Errorf("rollup lag points = %+v, want the last value, 2 s", g.DataPoints)
	}
	if u := got[MetricRollupLag].Unit; u != "s" {
		t.Errorf("rollup lag unit %q, want s", u)
	}
}

func TestMetricsNilAndEmpty(t *testing.T) {
	// A nil *Metrics records nothing and does not panic.
	var m *Metrics
	ctx := context.Background()
	m.Request(ctx, "r", 200)
	m.EventsApplied(ctx, "c", 1)
	m.EventsDuplicate(ctx, "c", 1)
	m.BatchSize(ctx, "c", 1)
	m.RollupLag(ctx, time.Second)
	m.RollupDuration(ctx, time.Second)
	m.CounterShards(ctx, 4)
	m.ReconcileCorrection(ctx, "likes", 1)
	m.DeadLetterDelivery(ctx, "c")
	m.RateLimited(ctx, "reactions")

	// Nothing recorded, nothing exported.
	_, reader := newTestMetrics(t)
	if got := collect(t, reader); len(got) != 0 {
		t.Errorf("metrics before any recording: %v", got)
	}
}

// TestMetricNamesGoogleAccepts: Google's OTLP endpoint rejects a metric
// whose name, or a point whose attribute key, is outside these patterns
// (Cloud Monitoring's OTLP metric ingestion rules).
func TestMetricNamesGoogleAccepts(t *testing.T) {
	name := regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_:./]*$`)
	key := regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.]*$`)
	for _, n := range []string{MetricRequests, MetricEventsApplied, MetricEventsDuplicate, MetricBatchSize, MetricRollupLag,
		MetricRollupDuration, MetricCounterShards, MetricReconcileCorrections, MetricReconcileCorrectionSize,
		MetricDeadLetterDeliveries, MetricRateLimited, MetricReactionGroups} {
		if !name.MatchString(n) {
			t.Errorf("metric name %q would be rejected", n)
		}
	}
	for _, k := range []string{AttrRoute, AttrStatus, AttrConsumer, AttrField, AttrKind} {
		if !key.MatchString(k) {
			t.Errorf("attribute key %q would be rejected", k)
		}
	}
	// And every name is one the SDK accepts (NewMetrics fails otherwise).
	if _, err := NewMetrics(sdkmetric.NewMeterProvider()); err != nil {
		t.Errorf("NewMetrics: %v", err)
	}
}
