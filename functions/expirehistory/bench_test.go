package expirehistoryfn_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/firestore"
	fspb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	expirehistoryfn "github.com/videngage/engagement/functions/expirehistory"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
)

// ops counts what the clients ask of Bigtable and Firestore, from the
// requests and answers on the wire.
type ops struct {
	btReads     atomic.Int64 // ReadRows requests
	btRowsRead  atomic.Int64 // rows returned
	btMutations atomic.Int64 // row mutations (MutateRow, each MutateRows entry)
	fsDocsRead  atomic.Int64 // documents returned (Firestore bills a read each)
	fsQueries   atomic.Int64 // RunQuery requests
	fsWrites    atomic.Int64 // writes committed
}

func (o *ops) reset() {
	for _, c := range []*atomic.Int64{&o.btReads, &o.btRowsRead, &o.btMutations, &o.fsDocsRead, &o.fsQueries, &o.fsWrites} {
		c.Store(0)
	}
}

type countedStream struct {
	grpc.ClientStream
	o *ops
}

func (s countedStream) SendMsg(m any) error {
	switch req := m.(type) {
	case *btpb.ReadRowsRequest:
		s.o.btReads.Add(1)
	case *btpb.MutateRowsRequest:
		s.o.btMutations.Add(int64(len(req.Entries)))
	case *fspb.RunQueryRequest:
		s.o.fsQueries.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

func (s countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		return err
	}
	switch resp := m.(type) {
	case *btpb.ReadRowsResponse:
		for _, c := range resp.Chunks {
			if c.GetCommitRow() {
				s.o.btRowsRead.Add(1)
			}
		}
	case *fspb.RunQueryResponse:
		if resp.Document != nil {
			s.o.fsDocsRead.Add(1)
		}
	case *fspb.BatchGetDocumentsResponse:
		if resp.GetFound() != nil {
			s.o.fsDocsRead.Add(1)
		}
	}
	return nil
}

func (o *ops) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return countedStream{ClientStream: s, o: o}, nil
}

func (o *ops) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		return err
	}
	switch r := req.(type) {
	case *btpb.MutateRowRequest, *btpb.CheckAndMutateRowRequest, *btpb.ReadModifyWriteRowRequest:
		o.btMutations.Add(1)
	case *fspb.GetDocumentRequest:
		o.fsDocsRead.Add(1)
	case *fspb.CommitRequest:
		o.fsWrites.Add(int64(len(r.Writes)))
	}
	return nil
}

// emulatorOwner is the Firestore emulator's credentials (as its client sends them).
type emulatorOwner struct{}

func (emulatorOwner) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}
func (emulatorOwner) RequireTransportSecurity() bool { return false }

// BenchmarkExpireHistoryCost runs the auto-delete job over 1,000 users
// whose auto-delete is on (3 months; each with 8 entries, 3 of them past
// the horizon) beside 1,000 users who keep everything, and prints what a
// pass costs per 1,000 auto-deleting users: the first pass (removing 3
// entries a user) and the next (nothing left to remove), from the requests
// the clients send:
//
//	go run ./cmd/withemulators -- go test -run '^$' -bench BenchmarkExpireHistoryCost -benchtime 1x ./functions/expirehistory/
func BenchmarkExpireHistoryCost(b *testing.B) {
	const users, kept, expired = 1000, 5, 3
	cfg := emulatortest.New(b)
	ctx := context.Background()
	o := &ops{}
	conn, err := grpc.NewClient("passthrough:///"+cfg.Bigtable.EmulatorHost,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainStreamInterceptor(o.stream), grpc.WithChainUnaryInterceptor(o.unary))
	if err != nil {
		b.Fatal(err)
	}
	bt, err := bigtable.NewClientWithConfig(ctx, cfg.Project, cfg.Bigtable.Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		b.Fatal(err)
	}
	// The Firestore client dials the emulator itself and ignores dial
	// options; a connection of ours (as it dials it) replaces its own.
	fsHost := os.Getenv("FIRESTORE_EMULATOR_HOST")
	if fsHost == "" {
		b.Fatal("FIRESTORE_EMULATOR_HOST is not set: run under cmd/withemulators")
	}
	fsConn, err := grpc.NewClient("passthrough:///"+fsHost,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(emulatorOwner{}),
		grpc.WithChainStreamInterceptor(o.stream), grpc.WithChainUnaryInterceptor(o.unary))
	if err != nil {
		b.Fatal(err)
	}
	fs, err := firestore.NewClientWithDatabase(ctx, cfg.Project, cfg.Firestore.Database, option.WithGRPCConn(fsConn))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bt.Close(); conn.Close(); fs.Close(); fsConn.Close() })
	store, settings := historystore.New(bt), historystore.NewSettings(fs)

	now := time.Now().UTC().Truncate(time.Millisecond)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var loadErr atomic.Value
	for i := range 2 * users {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			u := fmt.Sprintf("user-%05d", i)
			s := history.Settings{AutoDeleteMonths: 3}
			if i >= users {
				s.AutoDeleteMonths = 0 // keeps everything: not the job's
			}
			if err := settings.Put(ctx, u, s); err != nil {
				loadErr.Store(err)
				return
			}
			for j := range kept + expired {
				at := now.AddDate(0, 0, -10*(j+1)) // 10..50 days
				if j >= kept {
					at = now.AddDate(0, -4, -j) // past 3 months
				}
				if err := store.Apply(ctx, history.NewWatch(u, fmt.Sprintf("v%d", j), at, 1)); err != nil {
					loadErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := loadErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("BenchmarkExpireHistoryCost: loaded %d users × %d entries in %v\n", 2*users, kept+expired, time.Since(start).Round(time.Millisecond))

	h := expirehistoryfn.New(expirehistoryfn.Deps{Users: settings, Store: store, Now: func() time.Time { return now }})
	type pass struct {
		name                                                string
		rep                                                 expirehistoryfn.Report
		took                                                time.Duration
		btReads, btRows, btMut, fsDocs, fsQueries, fsWrites int64
	}
	var passes []pass
	b.ResetTimer()
	for range b.N {
		passes = passes[:0]
		for _, name := range []string{"first pass (3 entries a user to remove)", "next pass (nothing to remove)"} {
			o.reset()
			t0 := time.Now()
			code, rep := post(b, h, fmt.Sprintf(`{"users":%d}`, 2*users))
			if code != http.StatusOK || !rep.PassDone || rep.Users != users {
				b.Fatalf("%s: %d %+v", name, code, rep)
			}
			passes = append(passes, pass{name, rep, time.Since(t0), o.btReads.Load(), o.btRowsRead.Load(), o.btMutations.Load(), o.fsDocsRead.Load(), o.fsQueries.Load(), o.fsWrites.Load()})
		}
	}
	b.StopTimer()
	if passes[0].rep.Entries != users*expired || passes[1].rep.Entries != 0 {
		b.Fatalf("removed %d then %d entries, want %d then 0", passes[0].rep.Entries, passes[1].rep.Entries, users*expired)
	}
	per := func(n int64, p pass) float64 { return float64(n) * 1000 / float64(p.rep.Users) }
	fmt.Printf("BenchmarkExpireHistoryCost: per 1,000 auto-deleting users (%d more users keep everything)\n", users)
	fmt.Printf("%-42s %8s %8s %10s %8s %8s %8s %9s %8s\n", "", "removed", "BT reads", "BT rows", "BT muts", "FS docs", "FS qry", "FS writes", "time")
	for _, p := range passes {
		fmt.Printf("%-42s %8.0f %8.0f %10.0f %8.0f %8.0f %8.0f %9.0f %8v\n", p.name,
			per(int64(p.rep.Entries), p), per(p.btReads, p), per(p.btRows, p), per(p.btMut, p), per(p.fsDocs, p), per(p.fsQueries, p), per(p.fsWrites, p), p.took.Round(time.Millisecond))
	}
}
