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
// reads), whichever store or transaction issued it.
type wire struct {
	commits, rowWrites, reads metric.Int64Counter
}

// ClientOptions are the options every Spanner client of this system is built
// with: the interceptors that count its work into the global meter
// provider's telemetry.MetricSpanner* counters.
func ClientOptions() []option.ClientOption {
	w := &wire{
		commits:   telemetry.NewCounter(nil, telemetry.MetricSpannerCommits, "{commit}", "Spanner read-write transactions committed."),
		rowWrites: telemetry.NewCounter(nil, telemetry.MetricSpannerRowWrites, "{row}", "Spanner rows written or deleted by committed transactions, by table; a key range deleted counts one."),
		reads:     telemetry.NewCounter(nil, telemetry.MetricSpannerReads, "{call}", "Spanner read and query calls, inside transactions or not."),
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
	}
	return nil
}

func (w *wire) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err == nil && counted(ctx) {
		switch strings.TrimPrefix(method, rpcPrefix) {
		case "StreamingRead", "ExecuteStreamingSql":
			w.reads.Add(ctx, 1)
		}
	}
	return s, err
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
