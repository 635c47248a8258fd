package expirehistoryfn_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/topology"
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
// the horizon) beside 1,000 users who keep everything, in 4 partitions,
// and prints what a pass costs per 1,000 auto-deleting users: the first
// pass (removing 3 entries a user) and the next (nothing left to remove),
// from the requests the clients send, each with one partition worked at a
// time (a partition's rate), then a pass with the 4 at once. It writes the
// figures and the production arithmetic to docs/benchmarks/expire-history.md:
//
//	go run ./cmd/withemulators -- go test -run '^$' -bench BenchmarkExpireHistoryCost -benchtime 1x ./functions/expirehistory/
func BenchmarkExpireHistoryCost(b *testing.B) {
	const users, kept, expired, partitions = 1000, 5, 3, 4
	uptime := command("uptime")
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
	leases := leasestore.New(emulatortest.Spanner(b, cfg), nil)

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
	// Every document was written with its part: the walk of older ones
	// has nothing to do.
	if err := settings.SetCursor(ctx, "expire-history", historystore.JobCursor{PassStarted: now, PassEnded: now}); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("BenchmarkExpireHistoryCost: loaded %d users × %d entries in %v\n", 2*users, kept+expired, time.Since(start).Round(time.Millisecond))

	clock := now
	h := expirehistoryfn.New(expirehistoryfn.Deps{Users: settings, Store: store, Leases: leases, Now: func() time.Time { return clock }})
	type pass struct {
		name                                                string
		parallel                                            int
		rep                                                 expirehistoryfn.Report
		took                                                time.Duration
		btReads, btRows, btMut, fsDocs, fsQueries, fsWrites int64
	}
	var passes []pass
	b.ResetTimer()
	for range b.N {
		passes = passes[:0]
		for i, p := range []struct {
			name     string
			parallel int
		}{
			{"first pass (3 entries a user to remove)", 1},
			{"next pass (nothing to remove)", 1},
			{"next pass, 4 partitions at once", partitions},
		} {
			clock = now.Add(time.Duration(i) * expirehistoryfn.DefaultEvery)
			o.reset()
			t0 := time.Now()
			code, rep := post(b, h, fmt.Sprintf(`{"partitions":%d,"parallel":%d}`, partitions, p.parallel))
			if code != http.StatusOK || rep.Passes != partitions || rep.Users != users {
				b.Fatalf("%s: %d %+v", p.name, code, rep)
			}
			passes = append(passes, pass{p.name, p.parallel, rep, time.Since(t0), o.btReads.Load(), o.btRowsRead.Load(), o.btMutations.Load(), o.fsDocsRead.Load(), o.fsQueries.Load(), o.fsWrites.Load()})
		}
	}
	b.StopTimer()
	if passes[0].rep.Entries != users*expired || passes[1].rep.Entries != 0 {
		b.Fatalf("removed %d then %d entries, want %d then 0", passes[0].rep.Entries, passes[1].rep.Entries, users*expired)
	}
	per := func(n int64, p pass) float64 { return float64(n) * 1000 / float64(p.rep.Users) }
	var t strings.Builder
	fmt.Fprintf(&t, "| pass | partitions at once | removed | BT reads | BT rows | BT muts | FS docs | FS queries | FS writes | time | users/min per partition |\n")
	fmt.Fprintf(&t, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range passes {
		fmt.Fprintf(&t, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %v | %.0f |\n", p.name, p.parallel,
			per(int64(p.rep.Entries), p), per(p.btReads, p), per(p.btRows, p), per(p.btMut, p), per(p.fsDocs, p), per(p.fsQueries, p), per(p.fsWrites, p),
			p.took.Round(time.Millisecond), usersPerMinute(p.rep.Users, p.took, p.parallel))
	}
	fmt.Printf("BenchmarkExpireHistoryCost: per 1,000 auto-deleting users (%d more users keep everything)\n%s", users, t.String())

	// The sizing rate is the slower of the two one-at-a-time passes.
	rate := min(usersPerMinute(passes[0].rep.Users, passes[0].took, 1), usersPerMinute(passes[1].rep.Users, passes[1].took, 1))
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "benchmarks", "expire-history.md"),
		[]byte(expireReport(t.String(), rate, users, uptime)), 0o644); err != nil {
		b.Fatal(err)
	}
}

// usersPerMinute is the rate of one partition in a pass of users that took
// took with parallel partitions worked at once.
func usersPerMinute(users int, took time.Duration, parallel int) float64 {
	return float64(users) / took.Minutes() / float64(parallel)
}

// The production load the arithmetic sizes: users with auto-delete on.
const prodAutoDeleting = 100_000_000

// expireReport is docs/benchmarks/expire-history.md: the run's table and the
// partitions production needs at the measured rate.
func expireReport(table string, rate float64, users int, uptime string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Auto-delete sweeps (BenchmarkExpireHistoryCost)\n\n")
	fmt.Fprintf(&b, "Written by `go run ./cmd/withemulators -- go test -run '^$' -bench BenchmarkExpireHistoryCost -benchtime 1x ./functions/expirehistory/` (`make bench`); overwritten by each run.\n\n")
	fmt.Fprintf(&b, "- commit: %s\n- date: %s\n- machine: %s, %d CPUs, %s\n- uptime before the run: %s\n\n",
		command("git", "rev-parse", "--short", "HEAD"), time.Now().UTC().Format(time.RFC3339), runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), runtime.Version(), uptime)
	fmt.Fprintf(&b, "%d users with auto-delete on (3 months, 8 entries each, 3 of them past the horizon) beside %d who keep everything, in 4 partitions; counts per 1,000 auto-deleting users, from the requests the clients send. A partition's rate is its users over its time when the partitions are worked one at a time; with 4 at once, the pass's users over its time and the 4. The emulators share this machine's cores with each other and the benchmark, so the rate is a floor: in the cloud a partition waits on the network instead, and partitions run on separate instances.\n\n", users, users)
	b.WriteString(table)
	partitions, parallel := deployed()
	needed := math.Ceil(prodAutoDeleting / (rate * sweepMinutes))
	inFlight := int(expirehistoryfn.DefaultBudget/time.Minute) * parallel
	fmt.Fprintf(&b, "\n## Production\n\n")
	fmt.Fprintf(&b, "Sizing rate: %s users a minute per partition (the slower pass, one at a time). A partition starts a pass at most every %v, so an entry goes at most one pass plus %v after its horizon: within a day while a pass takes at most %v. With 2× headroom a pass takes at most %v, %.0f minutes.\n\n",
		commas(int(rate)), expirehistoryfn.DefaultEvery, expirehistoryfn.DefaultEvery, expirehistoryfn.DefaultEvery, expirehistoryfn.DefaultEvery/2, sweepMinutes)
	fmt.Fprintf(&b, "- %s users with auto-delete on ÷ (%s users a minute × %.0f minutes) = **%.0f partitions needed**; deployed: %d (the `expire-history` job's body in topology.json), %s users a partition, a pass of %.0f minutes at the measured rate.\n",
		commas(prodAutoDeleting), commas(int(rate)), sweepMinutes, needed, partitions,
		commas(prodAutoDeleting/partitions), float64(prodAutoDeleting)/float64(partitions)/rate)
	fmt.Fprintf(&b, "- Partitions worked at once: an invocation each minute, each working %d partitions for its %v budget: %d at once, so %s.\n",
		parallel, expirehistoryfn.DefaultBudget, inFlight, map[bool]string{true: "every partition is worked without waiting", false: "partitions wait their turn"}[inFlight >= partitions])
	fmt.Fprintf(&b, "- Per pass of every user: %s settings documents read and %s Bigtable scans (one each a user; most return no row), %s queries and cursor writes (one each per 100 users), plus two row mutations per entry removed.\n",
		commas(prodAutoDeleting), commas(prodAutoDeleting), commas(prodAutoDeleting/100))
	if int(needed) > partitions || int(needed) > inFlight {
		fmt.Fprintf(&b, "\n**The deployed partitions do not carry the load at the measured rate.**\n")
	}
	return b.String()
}

// deployed are the partitions and parallel of the expire-history job in
// topology.json.
func deployed() (partitions, parallel int) {
	for _, j := range topology.MustLoad().Scheduler {
		if j.Name == "expire-history" {
			p, _ := j.Body["partitions"].(float64)
			q, _ := j.Body["parallel"].(float64)
			return int(p), int(q)
		}
	}
	return 0, 0
}

// sweepMinutes is the longest a partition's pass may take with 2× headroom.
var sweepMinutes = (expirehistoryfn.DefaultEvery / 2).Minutes()

func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func command(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
