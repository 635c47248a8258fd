package spannerdb

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
)

// The work this process asked of Spanner, counted on the wire by gRPC
// interceptors on every client built with ClientOptions: what a Spanner bill
// and a node count follow (commits, row writes, reads), whichever store or
// transaction issued it.
var (
	commitRPCs, rowWrites, readRPCs atomic.Int64
	writesMu                        sync.Mutex
	writesByTable                   = map[string]int64{}
)

type uncountedKey struct{}

// Uncounted marks ctx so that the Spanner work done under it is left out of
// CurrentStats: a benchmark's own polling is not the work it measures.
func Uncounted(ctx context.Context) context.Context {
	return context.WithValue(ctx, uncountedKey{}, true)
}

func counted(ctx context.Context) bool { return ctx.Value(uncountedKey{}) == nil }

// ClientOptions are the options every Spanner client of this system is built
// with: the interceptors that count its work.
func ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(countUnary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(countStream)),
	}
}

const rpcPrefix = "/google.spanner.v1.Spanner/"

func countUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil || !counted(ctx) {
		return err
	}
	switch strings.TrimPrefix(method, rpcPrefix) {
	case "Commit":
		if c, ok := req.(*spannerpb.CommitRequest); ok {
			countCommit(c.GetMutations())
		}
	case "Read", "ExecuteSql":
		readRPCs.Add(1)
	}
	return nil
}

func countStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err == nil && counted(ctx) {
		switch strings.TrimPrefix(method, rpcPrefix) {
		case "StreamingRead", "ExecuteStreamingSql":
			readRPCs.Add(1)
		}
	}
	return s, err
}

// countCommit counts a committed transaction's row writes: one per row
// inserted, updated or replaced, one per key deleted, and one per key range
// deleted (Spanner's own count of mutations, which a range delete keeps at
// one whatever the rows it removes).
func countCommit(ms []*spannerpb.Mutation) {
	commitRPCs.Add(1)
	var n int64
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
		n += rows
		per[table] += rows
	}
	rowWrites.Add(n)
	writesMu.Lock()
	for t, k := range per {
		writesByTable[t] += k
	}
	writesMu.Unlock()
}

// WritesByTable returns the row writes committed so far per table.
func WritesByTable() map[string]int64 {
	writesMu.Lock()
	defer writesMu.Unlock()
	return maps.Clone(writesByTable)
}
