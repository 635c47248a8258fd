package spannerdb

import (
	"context"
	"io"
	"testing"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/videngage/engagement/shared/telemetry"
)

// stream hands out its messages, then io.EOF.
type stream struct {
	grpc.ClientStream
	msgs []*spannerpb.PartialResultSet
}

func (s *stream) RecvMsg(m any) error {
	if len(s.msgs) == 0 {
		return io.EOF
	}
	proto.Merge(m.(*spannerpb.PartialResultSet), s.msgs[0])
	s.msgs = s.msgs[1:]
	return nil
}

func values(vs ...string) []*structpb.Value {
	out := make([]*structpb.Value, len(vs))
	for i, v := range vs {
		out[i] = structpb.NewStringValue(v)
	}
	return out
}

// A streamed result's rows are counted whole, a value chunked over two
// messages once, and its bytes as received.
func TestResultStreamCountsRowsAndBytes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	w := &wire{
		rowsRead:  telemetry.NewCounter(mp, telemetry.MetricSpannerRowsRead, "{row}", ""),
		bytesRead: telemetry.NewCounter(mp, telemetry.MetricSpannerBytesRead, "By", ""),
	}
	one := &spannerpb.ResultSetMetadata{RowType: &spannerpb.StructType{Fields: []*spannerpb.StructType_Field{{Name: "a"}}}}
	// Rows r1 r22 r3, r22 split over three messages.
	msgs := []*spannerpb.PartialResultSet{
		{Metadata: one, Values: values("r1", "r"), ChunkedValue: true},
		{Values: values("2"), ChunkedValue: true},
		{Values: values("2", "r3")},
	}
	var size int64
	for _, m := range msgs {
		size += int64(proto.Size(m))
	}
	s := &resultStream{ClientStream: &stream{msgs: msgs}, ctx: context.Background(), w: w}
	for {
		if err := s.RecvMsg(&spannerpb.PartialResultSet{}); err != nil {
			break
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				got[m.Name] += p.Value
			}
		}
	}
	if got[telemetry.MetricSpannerRowsRead] != 3 || got[telemetry.MetricSpannerBytesRead] != size {
		t.Errorf("rows %d bytes %d, want 3 rows and %d bytes", got[telemetry.MetricSpannerRowsRead], got[telemetry.MetricSpannerBytesRead], size)
	}
}
