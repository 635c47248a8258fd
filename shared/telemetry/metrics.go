package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// The service's metric names. Exported over OTLP, Cloud Monitoring shows each
// as prometheus.googleapis.com/<name>/<kind> (counter, gauge, histogram),
// queried with PromQL as {"<name>"}. The Terraform alert policies do not read
// them: a metric exists only after its first point (see
// terraform/modules/engagement/monitoring.tf).
const (
	MetricRequests                = "engagement/requests"
	MetricEventsApplied           = "engagement/events_applied"
	MetricEventsDuplicate         = "engagement/events_duplicate"
	MetricBatchSize               = "engagement/batch_size"
	MetricRollupLag               = "engagement/rollup_lag_seconds"
	MetricRollupDuration          = "engagement/rollup_duration_seconds"
	MetricCounterShards           = "engagement/counter_shards"
	MetricReconcileCorrections    = "engagement/reconcile_corrections"
	MetricReconcileCorrectionSize = "engagement/reconcile_correction_size"
	MetricDeadLetterDeliveries    = "engagement/dead_letter_deliveries"
	MetricRateLimited             = "engagement/rate_limited"
	MetricReactionsUndone         = "engagement/reactions_undone"
	MetricRateLimitDegraded       = "engagement/rate_limit_degraded"
	MetricDetectionSkipped        = "engagement/detection_skipped"
	// Counted on the wire by every Spanner client (spannerdb.ClientOptions)
	// and every publisher (bus.Publisher): what the Spanner and Pub/Sub
	// bills follow.
	MetricSpannerCommits        = "engagement/spanner_commits"
	MetricSpannerRowWrites      = "engagement/spanner_row_writes"
	MetricSpannerReads          = "engagement/spanner_reads"
	MetricSpannerRowsRead       = "engagement/spanner_rows_read"
	MetricSpannerBytesRead      = "engagement/spanner_bytes_read"
	MetricMessagesPublished     = "engagement/messages_published"
	MetricMessageBytesPublished = "engagement/message_bytes_published"
	// Counted by the reactions' writer (reactionstore.Writer): its
	// transactions, so that requests ÷ transactions is the group size.
	MetricReactionGroups = "engagement/reaction_groups"
)

// Metric attribute keys.
const (
	AttrRoute    = "route"
	AttrStatus   = "status"
	AttrConsumer = "consumer"
	AttrField    = "field"
	AttrKind     = "kind"
	AttrTable    = "table"
	AttrTopic    = "topic"
)

// Metrics records the service's metrics. A nil *Metrics records nothing, so
// every method is safe to call anywhere.
type Metrics struct {
	requests            metric.Int64Counter
	eventsApplied       metric.Int64Counter
	eventsDuplicate     metric.Int64Counter
	batchSize           metric.Int64Histogram
	rollupLag           metric.Float64Gauge
	rollupDuration      metric.Float64Histogram
	counterShards       metric.Int64Histogram
	reconcileCorrection metric.Int64Counter
	correctionSize      metric.Int64Histogram
	deadLetters         metric.Int64Counter
	rateLimited         metric.Int64Counter
	reactionsUndone     metric.Int64Counter
	rateLimitDegraded   metric.Int64Counter
	detectionSkipped    metric.Int64Counter
}

// NewMetrics creates the instruments on mp; nil means the global meter
// provider (the one Setup installs; instruments created before Setup record
// into it once it is installed).
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := meterProvider(mp).Meter(scope)
	var errs []error
	i64counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	i64hist := func(name, unit, desc string, bounds ...float64) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	out := &Metrics{
		requests:        i64counter(MetricRequests, "{request}", "HTTP requests answered, by route and status."),
		eventsApplied:   i64counter(MetricEventsApplied, "{event}", "Events applied by a consumer."),
		eventsDuplicate: i64counter(MetricEventsDuplicate, "{event}", "Events a consumer skipped because it had applied them already (redeliveries)."),
		batchSize: i64hist(MetricBatchSize, "{event}", "Events per message a consumer handled.",
			1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
		counterShards: i64hist(MetricCounterShards, "{shard}", "Shard count of each counter a rollup pass folded.",
			4, 8, 16, 32, 64),
		reconcileCorrection: i64counter(MetricReconcileCorrections, "{correction}", "Counters repaired by reconciliation, by field."),
		correctionSize: i64hist(MetricReconcileCorrectionSize, "{count}", "Size (absolute value) of each reconciliation correction, by field.",
			1, 2, 5, 10, 100, 1000, 10_000, 100_000, 1_000_000),
		deadLetters: i64counter(MetricDeadLetterDeliveries, "{delivery}", "Deliveries of a poison message a consumer refused so that Pub/Sub dead-letters it: one per attempt, up to the subscription's maximum delivery attempts per message."),
		rateLimited: i64counter(MetricRateLimited, "{request}", "Requests refused by a per-user rate limit, by kind."),
		reactionsUndone: i64counter(MetricReactionsUndone, "{reaction}",
			"Reactions taken back: a like or dislike set to none (undo traffic). Exported each minute, its increase is the undos of that minute."),
		rateLimitDegraded: i64counter(MetricRateLimitDegraded, "{request}",
			"Requests whose per-user limit the instance decided alone, by kind, because the shared limit's store did not answer in time."),
		detectionSkipped: i64counter(MetricDetectionSkipped, "{skip}",
			"Parts of the manipulation detection left unread, by kind: a step whose candidates exceeded the merge's budget, or a cluster of items over MaxCandidates accounts."),
	}
	var err error
	out.rollupLag, err = m.Float64Gauge(MetricRollupLag, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest counter delta not yet folded into its snapshot, as of when a rollup pass listed the moved counters; while passes fail, at least the time since the last pass that listed them."))
	errs = append(errs, err)
	out.rollupDuration, err = m.Float64Histogram(MetricRollupDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of one rollup pass."),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// NewCounter creates the int64 counter name in the service's scope on mp
// (nil: the global meter provider, see NewMetrics); a no-op counter when the
// provider refuses it.
func NewCounter(mp metric.MeterProvider, name, unit, desc string) metric.Int64Counter {
	c, err := meterProvider(mp).Meter(scope).Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		return noop.Int64Counter{}
	}
	return c
}

// Request counts one answered HTTP request (the HTTP middleware calls it).
func (m *Metrics) Request(ctx context.Context, route string, status int) {
	if m == nil {
		return
	}
	m.requests.Add(ctx, 1, metric.WithAttributes(attribute.String(AttrRoute, route), attribute.Int(AttrStatus, status)))
}

// EventsApplied counts n events that consumer applied.
func (m *Metrics) EventsApplied(ctx context.Context, consumer string, n int) {
	if m == nil || n < 0 {
		return
	}
	m.eventsApplied.Add(ctx, int64(n), consumerAttr(consumer))
}

// EventsDuplicate counts n events that consumer skipped as already applied.
func (m *Metrics) EventsDuplicate(ctx context.Context, consumer string, n int) {
	if m == nil || n < 0 {
		return
	}
	m.eventsDuplicate.Add(ctx, int64(n), consumerAttr(consumer))
}

// BatchSize records the number of events in one message consumer handled.
func (m *Metrics) BatchSize(ctx context.Context, consumer string, n int) {
	if m == nil || n < 0 {
		return
	}
	m.batchSize.Record(ctx, int64(n), consumerAttr(consumer))
}

// RollupLag records the age of the oldest counter delta not yet folded into
// its snapshot as of when a pass listed the moved counters (0 when every
// delta was folded); the rollup records, while passes fail, at least the
// time since the last pass that listed them.
func (m *Metrics) RollupLag(ctx context.Context, lag time.Duration) {
	if m == nil {
		return
	}
	m.rollupLag.Record(ctx, max(lag, 0).Seconds())
}

// RollupDuration records how long one rollup pass took.
func (m *Metrics) RollupDuration(ctx context.Context, d time.Duration) {
	if m == nil {
		return
	}
	m.rollupDuration.Record(ctx, max(d, 0).Seconds())
}

// CounterShards records the shard count of one counter a rollup pass folded.
func (m *Metrics) CounterShards(ctx context.Context, shards int) {
	if m == nil || shards < 0 {
		return
	}
	m.counterShards.Record(ctx, int64(shards))
}

// ReconcileCorrection counts one correction that reconciliation made to a
// counter's field ("likes", "comments", ...) and records its size; delta is
// the correction as applied, of either sign. A zero delta is no correction.
func (m *Metrics) ReconcileCorrection(ctx context.Context, field string, delta int64) {
	if m == nil || delta == 0 {
		return
	}
	attrs := metric.WithAttributes(attribute.String(AttrField, field))
	m.reconcileCorrection.Add(ctx, 1, attrs)
	if delta < 0 {
		delta = -delta
	}
	m.correctionSize.Record(ctx, delta, attrs)
}

// DeadLetterDelivery counts one delivery of a poison message that consumer
// refused (Pub/Sub dead-letters the message after the maximum attempts).
func (m *Metrics) DeadLetterDelivery(ctx context.Context, consumer string) {
	if m == nil {
		return
	}
	m.deadLetters.Add(ctx, 1, consumerAttr(consumer))
}

// RateLimited counts one request refused by the per-user limit of kind
// ("reactions", "comments", "history").
func (m *Metrics) RateLimited(ctx context.Context, kind string) {
	if m == nil {
		return
	}
	m.rateLimited.Add(ctx, 1, metric.WithAttributes(attribute.String(AttrKind, kind)))
}

// ReactionUndone counts one reaction taken back: a user's like or dislike
// set to none (not a none that changed nothing, nor an erasure).
func (m *Metrics) ReactionUndone(ctx context.Context) {
	if m == nil {
		return
	}
	m.reactionsUndone.Add(ctx, 1)
}

// RateLimitDegraded counts n requests of kind whose per-user limit was
// decided by the instance's own limit, the shared one not answering.
func (m *Metrics) RateLimitDegraded(ctx context.Context, kind string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.rateLimitDegraded.Add(ctx, int64(n), metric.WithAttributes(attribute.String(AttrKind, kind)))
}

// DetectionSkipped counts n parts of the manipulation detection of kind
// (step, cluster) that were not judged.
func (m *Metrics) DetectionSkipped(ctx context.Context, kind string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.detectionSkipped.Add(ctx, int64(n), metric.WithAttributes(attribute.String(AttrKind, kind)))
}

func consumerAttr(consumer string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String(AttrConsumer, consumer))
}
