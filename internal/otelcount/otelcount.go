// Package otelcount reads the service's OpenTelemetry counters in process,
// through a metric ManualReader: the benchmarks' and tests' call counts
// (Spanner commits, row writes, reads and the rows and bytes they returned;
// Pub/Sub messages and bytes).
package otelcount

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/videngage/engagement/shared/telemetry"
)

// Reader collects the sums of a meter provider's counters on demand.
type Reader struct {
	manual *sdkmetric.ManualReader
}

var (
	global     *Reader
	globalOnce sync.Once
)

// Global installs, once per process, a meter provider read by a
// ManualReader as the global one, and returns its reader. The clients and
// instruments built with a nil meter provider (host.New, spannerdb.New,
// bus.NewPublisher) record into it, whether built before or after.
func Global() *Reader {
	globalOnce.Do(func() {
		global = &Reader{manual: sdkmetric.NewManualReader()}
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(global.manual)))
	})
	return global
}

// Snapshot is the counters' sums at one collection: by instrument name,
// then by the value of the instrument's one attribute of interest (see
// Collect), "" for the data points that lack it.
type Snapshot map[string]map[string]int64

// Collect reads every int64 counter, keyed by the value of the attribute key
// under each name in by (the others under "").
func (r *Reader) Collect(by map[string]string) Snapshot {
	var rm metricdata.ResourceMetrics
	out := Snapshot{}
	if err := r.manual.Collect(context.Background(), &rm); err != nil {
		return out
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			vals := out[m.Name]
			if vals == nil {
				vals = map[string]int64{}
				out[m.Name] = vals
			}
			for _, dp := range sum.DataPoints {
				var k string
				if key, ok := by[m.Name]; ok {
					if v, ok := dp.Attributes.Value(attribute.Key(key)); ok {
						k = v.Emit()
					}
				}
				vals[k] += dp.Value
			}
		}
	}
	return out
}

// Total is the sum of name over every attribute value.
func (s Snapshot) Total(name string) int64 {
	var n int64
	for _, v := range s[name] {
		n += v
	}
	return n
}

// Spanner is the work this process asked of Spanner, counted on the wire
// (spannerdb.ClientOptions), outside spannerdb.Uncounted contexts.
type Spanner struct {
	Commits   int64 // read-write transactions committed
	RowWrites int64 // rows written or deleted, a key range deleted counting one
	Reads     int64 // reads and queries, inside transactions or not
	RowsRead  int64 // rows the reads and queries returned
	BytesRead int64 // bytes of their results, as received
	// WritesByTable are the row writes per table.
	WritesByTable map[string]int64
}

// Spanner returns the Spanner work counted so far.
func (r *Reader) Spanner() Spanner {
	s := r.Collect(map[string]string{telemetry.MetricSpannerRowWrites: telemetry.AttrTable})
	return Spanner{
		Commits:       s.Total(telemetry.MetricSpannerCommits),
		RowWrites:     s.Total(telemetry.MetricSpannerRowWrites),
		Reads:         s.Total(telemetry.MetricSpannerReads),
		RowsRead:      s.Total(telemetry.MetricSpannerRowsRead),
		BytesRead:     s.Total(telemetry.MetricSpannerBytesRead),
		WritesByTable: s[telemetry.MetricSpannerRowWrites],
	}
}

// Minus returns s − o, field by field.
func (s Spanner) Minus(o Spanner) Spanner {
	out := Spanner{
		Commits: s.Commits - o.Commits, RowWrites: s.RowWrites - o.RowWrites, Reads: s.Reads - o.Reads,
		RowsRead: s.RowsRead - o.RowsRead, BytesRead: s.BytesRead - o.BytesRead,
		WritesByTable: map[string]int64{},
	}
	for t, n := range s.WritesByTable {
		if d := n - o.WritesByTable[t]; d != 0 {
			out.WritesByTable[t] = d
		}
	}
	return out
}

// Published is the Pub/Sub messages and message data this process
// published, by topic (bus.Publisher).
type Published struct {
	Messages, Bytes map[string]int64
}

// Published returns the messages and bytes published so far.
func (r *Reader) Published() Published {
	by := map[string]string{telemetry.MetricMessagesPublished: telemetry.AttrTopic, telemetry.MetricMessageBytesPublished: telemetry.AttrTopic}
	s := r.Collect(by)
	return Published{Messages: orEmpty(s[telemetry.MetricMessagesPublished]), Bytes: orEmpty(s[telemetry.MetricMessageBytesPublished])}
}

func orEmpty(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}
