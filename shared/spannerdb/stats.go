package spannerdb

import (
	"context"
	"strings"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/videngage/engagement/shared/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

type uncountedKey struct{}

// Uncounted marks ctx so that the Spanner work done under it is left out of
// the wire counts: a benchmark's own polling is not the work it measures.
func Uncounted(ctx context.Context) context.Context {
	return context.WithValue(ctx, uncountedKey{}, true)
}

func counted(ctx context.Context) bool { return ctx.Value(uncountedKey{}) == nil }

// wire counts the work this process asks of Spanner, on the wire: what a
// Spanner bill and a node count follow (commits, row writes by table,
// reads, the rows and bytes they return), whichever store or transaction
// issued it.
type wire struct {
	commits, rowWrites, reads, rowsRead, bytesRead metric.Int64Counter
}

// ClientOptions are the options every Spanner client of this system is built
// with: the interceptors that count its work into the global meter
// provider's telemetry.MetricSpanner* counters.
func ClientOptions() []option.ClientOption {
	w := &wire{
		commits:   telemetry.NewCounter(nil, telemetry.MetricSpannerCommits, "{commit}", "Spanner read-write transactions committed."),
		rowWrites: telemetry.NewCounter(nil, telemetry.MetricSpannerRowWrites, "{row}", "Spanner rows written or deleted by committed transactions, by table; a key range deleted counts one."),
		reads:     telemetry.NewCounter(nil, telemetry.MetricSpannerReads, "{call}", "Spanner read and query calls, inside transactions or not."),
		rowsRead:  telemetry.NewCounter(nil, telemetry.MetricSpannerRowsRead, "{row}", "Rows returned by Spanner reads and queries."),
		bytesRead: telemetry.NewCounter(nil, telemetry.MetricSpannerBytesRead, "By", "Bytes of the results of Spanner reads and queries, as received (protocol buffer encoding)."),
	}
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(w.unary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(w.stream)),
	}
}

const rpcPrefix = "/google.spanner.v1.Spanner/"

func (w *wire) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil || !counted(ctx) {
		return err
	}
	switch strings.TrimPrefix(method, rpcPrefix) {
	case "Commit":
		if c, ok := req.(*spannerpb.CommitRequest); ok {
			w.commit(ctx, c.GetMutations())
		}
	case "Read", "ExecuteSql":
		w.reads.Add(ctx, 1)
		if rs, ok := reply.(*spannerpb.ResultSet); ok {
			w.read(ctx, int64(len(rs.GetRows())), proto.Size(rs))
		}
	}
	return nil
}

func (w *wire) read(ctx context.Context, rows int64, bytes int) {
	if rows > 0 {
		w.rowsRead.Add(ctx, rows)
	}
	if bytes > 0 {
		w.bytesRead.Add(ctx, int64(bytes))
	}
}

func (w *wire) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err == nil && counted(ctx) {
		switch strings.TrimPrefix(method, rpcPrefix) {
		case "StreamingRead", "ExecuteStreamingSql":
			w.reads.Add(ctx, 1)
			return &resultStream{ClientStream: s, ctx: ctx, w: w}, nil
		}
	}
	return s, err
}

// resultStream counts the rows and bytes of a streamed read's results as
// they arrive. A row's values are spread over the stream's messages, the
// last value of a message continued in the next when it is chunked, so
// rows are counted as whole rows of values arrive.
type resultStream struct {
	grpc.ClientStream
	ctx     context.Context
	w       *wire
	columns int   // from the first message's metadata
	values  int64 // whole or started values received
	chunked bool  // the last value received continues in the next message
	rows    int64 // rows counted
}

func (s *resultStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	prs, ok := m.(*spannerpb.PartialResultSet)
	if err != nil || !ok {
		return err
	}
	if s.columns == 0 {
		s.columns = len(prs.GetMetadata().GetRowType().GetFields())
	}
	n := int64(len(prs.GetValues()))
	if s.chunked && n > 0 {
		n-- // the first value finishes the last one of the previous message
	}
	s.values += n
	s.chunked = prs.GetChunkedValue()
	var rows int64
	if s.columns > 0 {
		rows = s.values/int64(s.columns) - s.rows
		s.rows += rows
	}
	s.w.read(s.ctx, rows, proto.Size(prs))
	return nil
}

// commit counts a committed transaction and its row writes: one per row
// inserted, updated or replaced, one per key deleted, and one per key range
// deleted (Spanner's own count of mutations, which a range delete keeps at
// one whatever the rows it removes).
func (w *wire) commit(ctx context.Context, ms []*spannerpb.Mutation) {
	w.commits.Add(ctx, 1)
	per := map[string]int64{}
	for _, m := range ms {
		var table string
		var rows int64
		switch op := m.GetOperation().(type) {
		case *spannerpb.Mutation_Insert:
			table, rows = op.Insert.GetTable(), int64(len(op.Insert.GetValues()))
		case *spannerpb.Mutation_Update:
			table, rows = op.Update.GetTable(), int64(len(op.Update.GetValues()))
		case *spannerpb.Mutation_InsertOrUpdate:
			table, rows = op.InsertOrUpdate.GetTable(), int64(len(op.InsertOrUpdate.GetValues()))
		case *spannerpb.Mutation_Replace:
			table, rows = op.Replace.GetTable(), int64(len(op.Replace.GetValues()))
		case *spannerpb.Mutation_Delete_:
			ks := op.Delete.GetKeySet()
			table, rows = op.Delete.GetTable(), int64(len(ks.GetKeys())+len(ks.GetRanges()))
			if ks.GetAll() {
				rows++
			}
		default:
			continue
		}
		per[table] += rows
	}
	for t, n := range per {
		w.rowWrites.Add(ctx, n, metric.WithAttributes(attribute.String(telemetry.AttrTable, t)))
	}
}
