package prepareexportfn_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	prepareexportfn "github.com/videngage/engagement/functions/prepareexport"
	"github.com/videngage/engagement/internal/accounttest"
	"github.com/videngage/engagement/internal/capacity"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/objects"
	"github.com/videngage/engagement/shared/reaction"
)

// storageElsewhere is whether the Cloud Storage emulator runs in another
// process: read before TestMain, which starts one in this process when
// none is named, whose objects would count in this process's heap.
var storageElsewhere = os.Getenv("STORAGE_EMULATOR_HOST") != ""

// memoryShare is the part of an instance's memory GOMEMLIMIT is set to
// (terraform/modules/engagement/functions.tf).
const memoryShare = 0.75

// accountSize is a user's account as the export reads it.
type accountSize struct {
	name                                string
	reactions, comments, entries, trail int
}

// The accounts measured: a large account (prepared rather than streamed
// from EXPORT_ASYNC_ABOVE, 1,000 items in the first pages) and the
// largest history the erasure drill runs.
var accountSizes = []accountSize{
	{"large: 5,000 reactions, 5,000 history entries, 500 comments, 200 audit entries", 5000, 500, 5000, 200},
	{"largest: 5,000 reactions, 100,000 history entries, 500 comments, 200 audit entries", 5000, 500, 100_000, 200},
}

// BenchmarkPrepareExportMemory runs PrepareExport's push handler on the
// exports bucket of the Cloud Storage emulator with 1 to twice the
// deployed concurrency's pushes at once, each preparing one user's
// export, and measures the heap. Each push's last store read waits until
// every push of the round has written its whole document into its
// object's writer, so that all of them hold their writers at once; there
// a GC gives the live heap of that many pushes at their peak. The heap in
// use (garbage included) is sampled every millisecond throughout. It
// writes docs/benchmarks/prepareexport.md and fails when the live heap of
// an environment's concurrency, with the capacity model's headroom, does
// not fit within GOMEMLIMIT, three quarters of an instance's memory:
//
//	go run ./cmd/withemulators -- go test -run '^$' -bench BenchmarkPrepareExportMemory -benchtime 1x ./functions/prepareexport/
func BenchmarkPrepareExportMemory(b *testing.B) {
	if !storageElsewhere {
		b.Fatal("the Cloud Storage emulator would run in this process and count in its heap: run under cmd/withemulators")
	}
	uptime := command("uptime")
	envs := map[string]capacity.Function{}
	deployed := 0
	levels := []int{1}
	for _, env := range []string{"prod", "dev"} {
		d, err := capacity.LoadDeployment(filepath.Join("..", ".."), env)
		if err != nil {
			b.Fatal(err)
		}
		fn, ok := d.Functions["PrepareExport"]
		if !ok {
			b.Fatalf("%s deploys no PrepareExport", env)
		}
		envs[env] = fn
		deployed = max(deployed, fn.Concurrency)
		levels = append(levels, fn.Concurrency)
	}
	levels = append(levels, deployed/2, 2*deployed)
	slices.Sort(levels)
	levels = slices.Compact(slices.DeleteFunc(levels, func(n int) bool { return n < 1 }))
	bucket := emulatortest.ExportsBucket(b)

	var rounds []memoryRound
	b.ResetTimer()
	for range b.N {
		rounds = rounds[:0]
		for _, size := range accountSizes {
			for _, n := range levels {
				r := measureRound(b, bucket, size, n)
				rounds = append(rounds, r)
				fmt.Printf("BenchmarkPrepareExportMemory: %s, %d at once: %s\n", size.name, n, r)
			}
		}
	}
	b.StopTimer()

	var t strings.Builder
	fmt.Fprintf(&t, "| account | pushes at once | document | base live heap | live heap, all at their peak | per push | peak heap in use (sampled) | time |\n")
	fmt.Fprintf(&t, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rounds {
		fmt.Fprintf(&t, "| %s | %d | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %v |\n", r.size.name, r.pushes,
			mib(r.document), mib(r.base), mib(r.live), mib(r.live-r.base)/float64(r.pushes), mib(r.peak), r.took.Round(time.Millisecond))
	}
	var verdict strings.Builder
	var over []string
	for _, env := range []string{"prod", "dev"} {
		fn := envs[env]
		worst := memoryRound{}
		for _, r := range rounds {
			if r.pushes == fn.Concurrency && r.live > worst.live {
				worst = r
			}
		}
		limit := memoryShare * fn.MemoryMiB
		fits := capacity.Headroom*mib(worst.live) <= limit
		fmt.Fprintf(&verdict, "- %s: %.0f MiB an instance, concurrency %d, GOMEMLIMIT %.0f MiB: %d pushes at once hold **%.1f MiB** live (%s), %.0f%% of GOMEMLIMIT: %s.\n",
			env, fn.MemoryMiB, fn.Concurrency, limit, fn.Concurrency, mib(worst.live), worst.size.name, 100*mib(worst.live)/limit,
			map[bool]string{true: fmt.Sprintf("fits with %g× headroom", capacity.Headroom), false: fmt.Sprintf("**less than %g× headroom**", capacity.Headroom)}[fits])
		if !fits {
			over = append(over, fmt.Sprintf("%s: %d pushes at once hold %.1f MiB live: less than %g× headroom under GOMEMLIMIT, %.0f MiB", env, fn.Concurrency, mib(worst.live), capacity.Headroom, limit))
		}
	}
	fmt.Printf("BenchmarkPrepareExportMemory:\n%s\n%s", t.String(), verdict.String())
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "benchmarks", "prepareexport.md"),
		[]byte(memoryReport(t.String(), verdict.String(), uptime)), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, o := range over {
		b.Error(o)
	}
}

// memoryRound is one round of pushes at once.
type memoryRound struct {
	size   accountSize
	pushes int
	// base is the live heap before the round, live the live heap with every
	// push at its peak, peak the largest heap in use sampled during it.
	base, live, peak uint64
	document         int64 // bytes of one export's document
	took             time.Duration
}

func (r memoryRound) String() string {
	return fmt.Sprintf("base %.1f MiB, live %.1f MiB at the peak (%.1f MiB a push), heap in use up to %.1f MiB, document %.1f MiB, %v",
		mib(r.base), mib(r.live), mib(r.live-r.base)/float64(r.pushes), mib(r.peak), mib(r.document), r.took.Round(time.Millisecond))
}

// measureRound prepares n users' exports of the given size at once, each
// a push of its own, and checks that each document was written.
func measureRound(b *testing.B, bucket *objects.Bucket, size accountSize, n int) memoryRound {
	ctx := b.Context()
	acct := &bigAccount{size: size, peak: newPeak(n)}
	h := prepareexportfn.New(prepareexportfn.Deps{
		Exporter: account.Exporter{Reactions: acct, Comments: acct, History: acct, Settings: acct, Moderation: auditTrail{size.trail}},
		Exports:  noLeases{},
		Prepared: bucket,
	}, nil)
	msgs := make([]bus.Message, n)
	exports := make([]account.PreparedExport, n)
	for i := range n {
		user := fmt.Sprintf("u%d-%d-%d", size.entries, n, i)
		exports[i] = account.NewPreparedExport(user, time.Now())
		if err := bucket.Write(ctx, exports[i].Pending(), "text/plain").Close(); err != nil {
			b.Fatal(err)
		}
		data, err := account.ExportMessage{UserID: user, Export: exports[i], Lease: "l", Deadline: time.Now().Add(10 * time.Minute)}.Encode()
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = bus.Message{ID: user, Data: data, Attributes: map[string]string{"kind": account.ExportKind}}
	}

	r := memoryRound{size: size, pushes: n}
	runtime.GC()
	r.base = readMetric(liveHeap)
	stop := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		var peak uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, readMetric(heapInUse))
			select {
			case <-stop:
				sampled <- peak
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	outcomes := make([]pushtest.Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outcomes[i] = pushtest.Deliver(b, h, msgs[i], "account-export") })
	}
	wg.Wait()
	r.took = time.Since(start)
	close(stop)
	r.peak = <-sampled
	r.live = acct.peak.live
	if !acct.peak.reached() {
		b.Fatalf("%d pushes: not all of them reached their peak", n)
	}
	for i, o := range outcomes {
		if o != pushtest.Acked {
			b.Fatalf("push %d of %d: %v, want acknowledged", i, n, o)
		}
		objs, err := bucket.List(ctx, exports[i].Prefix())
		if err != nil || len(objs) != 1 || objs[0].Name != exports[i].Document() || objs[0].Size == 0 {
			b.Fatalf("push %d of %d left %v, %v; want the document alone", i, n, objs, err)
		}
		r.document = objs[0].Size
		if err := bucket.Delete(ctx, objs[0].Name); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// The runtime metrics read: the heap marked live by the last GC, and the
// heap's objects, live or not yet collected.
const (
	liveHeap  = "/gc/heap/live:bytes"
	heapInUse = "/memory/classes/heap/objects:bytes"
)

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// peak holds every push of a round at its peak, its whole document written
// into its object's writer, until all n are there; the last to arrive
// collects garbage and reads the live heap.
type peak struct {
	n       int
	arrived atomic.Int64
	users   sync.Map
	all     chan struct{}
	live    uint64
}

func newPeak(n int) *peak { return &peak{n: n, all: make(chan struct{})} }

// arrive holds the user's push until every push has arrived; only the
// first call of each user counts.
func (p *peak) arrive(ctx context.Context, user string) error {
	if _, again := p.users.LoadOrStore(user, true); again {
		return nil
	}
	if p.arrived.Add(1) == int64(p.n) {
		runtime.GC()
		p.live = readMetric(liveHeap)
		close(p.all)
	}
	// A push that failed before its peak would hold the others until
	// their deadline: a minute is ample for the round's writes.
	select {
	case <-p.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return fmt.Errorf("%d of %d pushes reached their peak within a minute", p.arrived.Load(), p.n)
	}
}

func (p *peak) reached() bool {
	select {
	case <-p.all:
		return true
	default:
		return false
	}
}

// bigAccount is every user's account, of one size: the pages the stores
// would return, generated as read. Safe for concurrent use.
type bigAccount struct {
	size accountSize
	peak *peak
}

var exportEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (a *bigAccount) ListByUser(_ context.Context, _ string, after string, limit int) ([]reaction.UserReaction, error) {
	start := accounttest.Next("video-%08d", after)
	var out []reaction.UserReaction
	for i := start; i < a.size.reactions && len(out) < limit; i++ {
		out = append(out, reaction.UserReaction{ContentID: fmt.Sprintf("video-%08d", i),
			State: reaction.State{Reaction: reaction.Like, Version: int64(i%7 + 1)}, UpdateTime: exportEpoch.Add(time.Duration(i) * time.Minute)})
	}
	return out, nil
}

func (a *bigAccount) ListByAuthor(_ context.Context, user, after string, limit int) ([]comment.Comment, error) {
	start := accounttest.Next("comment-%08d", after)
	var out []comment.Comment
	for i := start; i < a.size.comments && len(out) < limit; i++ {
		out = append(out, comment.Comment{ID: fmt.Sprintf("comment-%08d", i), VideoID: fmt.Sprintf("video-%08d", i), AuthorID: user,
			Text: "A comment of a realistic length, about as long as most of the comments people write under a video.", Status: comment.Visible,
			CreateTime: exportEpoch.Add(time.Duration(i) * time.Hour), UpdateTime: exportEpoch.Add(time.Duration(i) * time.Hour)})
	}
	return out, nil
}

func (a *bigAccount) List(_ context.Context, _ string, after *history.Cursor, _ time.Time, size int) (history.Page, error) {
	start := 0
	if after != nil {
		start = accounttest.Next("video-%08d", after.VideoID)
	}
	var p history.Page
	for i := start; i < a.size.entries && len(p.Entries) < size; i++ {
		p.Entries = append(p.Entries, history.Entry{VideoID: fmt.Sprintf("video-%08d", i),
			WatchedAt: exportEpoch.Add(-time.Duration(i) * time.Minute), PositionSeconds: float64(i%3600) + 0.5})
	}
	if start+len(p.Entries) < a.size.entries {
		last := p.Entries[len(p.Entries)-1]
		p.Next = &history.Cursor{At: last.WatchedAt, VideoID: last.VideoID}
	}
	return p, nil
}

// Get is the settings, the export's last read: its push waits there for
// the others.
func (a *bigAccount) Get(ctx context.Context, user string) (history.Settings, error) {
	if err := a.peak.arrive(ctx, user); err != nil {
		return history.Settings{}, err
	}
	return history.Settings{AutoDeleteMonths: 18}, nil
}

// auditTrail is the moderation audit trail's n entries about each user.
type auditTrail struct{ n int }

func (t auditTrail) List(_ context.Context, f moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error) {
	start := 0
	if after != nil {
		start = accounttest.Next("entry-%08d", after.ID)
	}
	var out []moderation.Entry
	for i := start; i < t.n && len(out) < limit; i++ {
		ev := moderation.Evidence{Items: []moderation.Item{{ContentID: fmt.Sprintf("video-%08d", i), Reaction: "like"}},
			WindowStart: exportEpoch.Add(-time.Hour), WindowEnd: exportEpoch, GroupSize: 12, YoungAccounts: 10}
		out = append(out, moderation.Entry{ID: fmt.Sprintf("entry-%08d", i), Time: exportEpoch.Add(-time.Duration(i) * time.Hour), UserID: f.UserID,
			Action: moderation.ActionFlag, Actor: moderation.DetectorGroups, ActorKind: moderation.ActorAutomatic, Reason: ev.Summary(), Evidence: &ev, Changed: true})
	}
	var next *moderation.EntryCursor
	if start+len(out) < t.n {
		next = &moderation.EntryCursor{ID: out[len(out)-1].ID, Time: out[len(out)-1].Time}
	}
	return out, next, nil
}

// noLeases ends every lease.
type noLeases struct{}

func (noLeases) End(context.Context, string, string) error { return nil }

func mib[N uint64 | int64](n N) float64 { return float64(n) / (1 << 20) }

// memoryReport is docs/benchmarks/prepareexport.md.
func memoryReport(table, verdict, uptime string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# PrepareExport's memory (BenchmarkPrepareExportMemory)\n\n")
	fmt.Fprintf(&b, "Written by `go run ./cmd/withemulators -- go test -run '^$' -bench BenchmarkPrepareExportMemory -benchtime 1x ./functions/prepareexport/`; overwritten by each run.\n\n")
	fmt.Fprintf(&b, "- commit: %s\n- date: %s\n- machine: %s, %d CPUs, %s memory, %s, %s\n- uptime before the run: %s\n- uptime after the run: %s\n\n",
		commit(), time.Now().UTC().Format(time.RFC3339), procInfo("/proc/cpuinfo", "model name"), runtime.NumCPU(), procInfo("/proc/meminfo", "MemTotal"), runtime.GOOS+"/"+runtime.GOARCH, runtime.Version(), uptime, command("uptime"))
	fmt.Fprintf(&b, "PrepareExport's push handler, as deployed, prepares one user's export a push, on the exports bucket of the Cloud Storage emulator (fake-gcs-server, in the process of `cmd/withemulators`, so its objects are not in the measured heap); the stores are in-memory fakes returning the pages the real ones would (the export's own page sizes). Each round delivers one push per user at once. Every push's last store read (the settings) waits until every push of the round has written its whole document into its object's writer, so all of them hold their writers at once; there one GC gives the **live heap** of that many pushes at their peak. The base is the live heap before the round (the test binary and its clients). The heap in use is the heap's objects, garbage not yet collected included (GOGC 100, no GOMEMLIMIT), sampled every millisecond. The heap does not depend on the machine's load; the times do.\n\n")
	b.WriteString(table)
	fmt.Fprintf(&b, "\n## Against the deployed settings\n\nGOMEMLIMIT is three quarters of the instance's memory (terraform/modules/engagement/functions.tf). The live heap must fit within it with the capacity model's 2× headroom: as the live heap nears the limit the GC runs ever more often, and past it without end until the instance is killed at its memory limit; the heap in use above the live heap is garbage the GC collects as it nears the limit. A deployed instance's base is larger than the test binary's (its Spanner, Bigtable and Firestore clients), and its store reads hold pages of their own.\n\n")
	b.WriteString(verdict)
	return b.String()
}

func commit() string {
	c := command("git", "rev-parse", "--short", "HEAD")
	if out := command("git", "status", "--porcelain", "--untracked-files=no"); out != "" && out != "unknown" {
		c += "+changes"
	}
	return c
}

// procInfo is the first value of key in a /proc file of "key: value" lines.
func procInfo(file, key string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func command(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
