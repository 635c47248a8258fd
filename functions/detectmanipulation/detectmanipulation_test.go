package detectmanipulationfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/moderationtest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func TestMain(m *testing.M) {
	flag.Parse()
	emulatortest.Main(m)
}

// ringOf30 is the reactions of most tests: 600 ordinary accounts
// on 3,000 items and a ring of 30 on 4 items, over the 20 minutes before now.
func ringOf30(now time.Time) moderationtest.World {
	return moderationtest.Population{
		Seed: 5, Ordinary: 600, PerUser: 2, Catalogue: 3000, NewShare: 0.1,
		Rings: []moderationtest.Ring{{Size: 30, Items: 4, Spread: 5 * time.Minute}},
	}.Generate(now.Add(-20 * time.Minute))
}

// seededRing is a Spanner database of the test's own holding ringOf30's
// reactions before now.
func seededRing(t *testing.T) (*spannerdb.DB, time.Time, moderationtest.World) {
	t.Helper()
	db := emulatortest.Spanner(t, emulatortest.New(t))
	now := time.Now().UTC()
	w := ringOf30(now)
	seed(t, db, w)
	return db, now, w
}

// seed writes the world's reactions as reaction rows.
func seed(t *testing.T, db *spannerdb.DB, w moderationtest.World) {
	t.Helper()
	for _, ms := range w.Mutations(500) {
		if _, err := db.Client.Apply(spannerdb.Uncounted(context.Background()), ms); err != nil {
			t.Fatal(err)
		}
	}
}

// stores are the detection's stores over db, and the moderation store
// among them.
func stores(db *spannerdb.DB) (detectmanipulationfn.Store, *moderationstore.Store) {
	rs := moderationstore.New(db, moderationstore.Gate{})
	return detectmanipulationfn.Stores(reactionstore.New(db), rs), rs
}

// newDeps is the detection the tests run, on store with leases over db, at
// now: 4 partitions merged in 3 buckets, half-hour steps, the first run
// reading the hour before now (ringOf30's). Each test changes what it is
// about.
func newDeps(db *spannerdb.DB, store detectmanipulationfn.Store, now time.Time) detectmanipulationfn.Deps {
	return detectmanipulationfn.Deps{Store: store, Leases: leasestore.New(db, nil), Partitions: 4, MergeBuckets: 3,
		Step: 30 * time.Minute, FirstLookback: time.Hour, Now: func() time.Time { return now }}
}

// invoke sends h the scheduler's request.
func invoke(h http.Handler) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/internal/detect-manipulation", strings.NewReader("{}")))
	return rec
}

// killedRun invokes h, which is to fail as a run killed midway does.
func killedRun(t *testing.T, h http.Handler) {
	t.Helper()
	if rec := invoke(h); rec.Code < 500 {
		t.Fatalf("killed run: %d %s", rec.Code, rec.Body)
	}
}

func run(t *testing.T, h http.Handler) detectmanipulationfn.Report {
	t.Helper()
	rec := invoke(h)
	if rec.Code != http.StatusOK {
		t.Fatalf("run: %d %s", rec.Code, rec.Body)
	}
	var rep detectmanipulationfn.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func flagged(t *testing.T, rs *moderationstore.Store) map[string]moderation.Flag {
	t.Helper()
	out := map[string]moderation.Flag{}
	var cur *moderation.Cursor
	for {
		page, next, err := rs.ListFlagged(context.Background(), cur, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range page {
			out[f.UserID] = f
		}
		if next == nil {
			return out
		}
		cur = next
	}
}

// flaggedOnce returns the accounts flagged, sorted, and wants one audit
// entry for each: its flag.
func flaggedOnce(t *testing.T, db *spannerdb.DB, rs *moderationstore.Store) []string {
	t.Helper()
	got := slices.Sorted(maps.Keys(flagged(t, rs)))
	for _, u := range got {
		if es := trail(t, db, moderation.Filter{UserID: u}); len(es) != 1 {
			t.Errorf("%s has %d audit entries, want one flag", u, len(es))
		}
	}
	return got
}

// spikeAt adds to w an item whose likes rise a thousandfold within the
// minute starting at m: 3 in the half hour before, 150 in the minute.
func spikeAt(w *moderationtest.World, item string, m time.Time) {
	for i := range 3 {
		u := fmt.Sprintf("spike-base-%d", i)
		w.Reactions = append(w.Reactions, moderation.Reaction{UserID: u, ContentID: item, Reaction: "like", At: m.Add(-time.Duration(5+10*i) * time.Minute)})
	}
	for i := range 150 {
		u := fmt.Sprintf("spike-%d", i)
		w.Reactions = append(w.Reactions, moderation.Reaction{UserID: u, ContentID: item, Reaction: "like", At: m.Add(time.Duration(i) * 200 * time.Millisecond)})
	}
}

// breaking fails SavePartial of one partition once, after its read: an
// invocation killed in the middle of a partition's step.
type breaking struct {
	detectmanipulationfn.Store
	name string
	once sync.Once
}

var errKilled = errors.New("killed")

func (b *breaking) SavePartial(ctx context.Context, layout, name string, partitions, part int, from, to time.Time, p moderation.Partial, spikes []moderation.Spike, baseline time.Duration) error {
	killed := false
	if name == b.name {
		b.once.Do(func() { killed = true })
	}
	if killed {
		return errKilled
	}
	return b.Store.SavePartial(ctx, layout, name, partitions, part, from, to, p, spikes, baseline)
}

func newMetrics(t *testing.T) (*telemetry.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := telemetry.NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// skipped reads the detection's skips by kind from the metrics.
func skipped(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricDetectionSkipped {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic {
				t.Fatalf("%s is %T, want a counter", m.Name, m.Data)
			}
			for _, p := range sum.DataPoints {
				kind, _ := p.Attributes.Value(telemetry.AttrKind)
				out[kind.AsString()] += p.Value
			}
		}
	}
	return out
}

func trail(t *testing.T, db *spannerdb.DB, f moderation.Filter) []moderation.Entry {
	t.Helper()
	var out []moderation.Entry
	var cur *moderation.EntryCursor
	for {
		page, next, err := moderationstore.New(db, moderationstore.Gate{}).List(context.Background(), f, cur, 100)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if next == nil {
			return out
		}
		cur = next
	}
}

// A ring of 50 new accounts liking 4 new videos within 5 minutes, among
// 2,000 ordinary accounts, 20 heavy users, a viral video liked by 1,200 of
// them within 10 minutes, a channel's release liked by 40 established fans
// and a video whose likes rise a thousandfold in a minute, over an hour,
// read by 4 partitions in steps of 15 minutes, one of them killed once in
// the middle of a step: the ring, and only the ring, is flagged once each,
// with its evidence, and the spike is on the record once for review; the
// next run flags nothing again, and a moderator's unflag stands when the
// same evidence is read again.
func TestPartitionsFlagTheRingAndOnlyTheRing(t *testing.T) {
	cfg := emulatortest.New(t)
	ctx := context.Background()
	db := emulatortest.Spanner(t, cfg)
	now := time.Now().UTC()
	world := moderationtest.Population{
		Seed: 11, Ordinary: 2000, PerUser: 2, Catalogue: 10000, Heavy: 20, HeavyPerUser: 40, NewShare: 0.1,
		Viral: 1200, ViralSpread: 10 * time.Minute,
		Fans: 40, FanItems: 4, FanSpread: 15 * time.Minute,
		Rings: []moderationtest.Ring{{Size: 50, Items: 4, Spread: 5 * time.Minute}},
	}.Generate(now.Add(-30 * time.Minute))
	spikeMinute := now.Add(-50 * time.Minute).Truncate(time.Minute)
	spikeAt(&world, "spiked", spikeMinute)
	started := time.Now()
	seed(t, db, world)
	t.Logf("seeded %d reactions in %v", len(world.Reactions), time.Since(started))
	s, rs := stores(db)
	deps := newDeps(db, &breaking{Store: s, name: detectmanipulationfn.PartitionName(4, 2)}, now)
	deps.MergeBuckets, deps.Step, deps.Ahead, deps.FirstLookback = 4, 15*time.Minute, 2, 2*time.Hour
	h := detectmanipulationfn.New(deps)

	// The killed invocation answers an error and leaves what it did not
	// commit to the next one.
	killedRun(t, h)
	before, started := otelcount.Global().Spanner(), time.Now()
	rep := run(t, h)
	cost := otelcount.Global().Spanner().Minus(before)
	t.Logf("run in %v: %+v; Spanner: %d reads, %d commits, %d rows written", time.Since(started), rep, cost.Reads, cost.Commits, cost.RowWrites)
	mark, err := rs.Watermark(ctx, detectmanipulationfn.Job)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(-2 * time.Hour).Add(-10 * time.Second).Truncate(time.Minute); now.Add(-10*time.Second).Sub(mark) >= 15*time.Minute || mark.Sub(want)%(15*time.Minute) != 0 {
		t.Errorf("merge watermark %v: want the last whole 15-minute step from %v", mark, want)
	}
	flags := flagged(t, rs)
	for u, f := range flags {
		if f.Reason != moderation.Automatic || f.Evidence == nil || f.Evidence.GroupSize != 50 || len(f.Evidence.Items) != 4 ||
			f.Evidence.WindowEnd.Sub(f.Evidence.WindowStart) > 5*time.Minute || f.Evidence.YoungAccounts != 50 {
			t.Errorf("flag %v: %s at %v, evidence %+v", u, f.Reason, f.FlaggedAt, f.Evidence)
		}
	}
	ring := slices.Sorted(maps.Keys(world.Ring))
	if got := flaggedOnce(t, db, rs); !slices.Equal(got, ring) {
		t.Fatalf("flagged %d accounts %v, want the ring's %d", len(got), got, len(ring))
	}

	// The spike is on the record once, for review, with its evidence.
	reviews := trail(t, db, moderation.Filter{VideoID: "spiked"})
	if len(reviews) != 1 {
		t.Fatalf("%d entries on the spiked video, want one review: %+v", len(reviews), reviews)
	}
	if e := reviews[0]; e.Action != moderation.ActionReview || e.Actor != moderation.DetectorSpikes || e.Changed || e.Evidence == nil ||
		e.Evidence.PerMinute != 150 || e.Evidence.BaselinePerMinute == nil || *e.Evidence.BaselinePerMinute != 0.1 ||
		!e.Evidence.WindowStart.Equal(spikeMinute) || !e.Evidence.BaselineStart.Equal(spikeMinute.Add(-30*time.Minute)) {
		t.Errorf("review %+v, evidence %+v", e, e.Evidence)
	}
	// The viral video (1,200 likes within 10 minutes, none before) is a
	// thousandfold rise too when its busiest minute reaches 100 likes, which
	// depends on how its spread meets the minutes: it may be on the record
	// for review as well, and nothing else may.
	var flagEntries int
	for _, e := range trail(t, db, moderation.Filter{}) {
		switch {
		case e.Action == moderation.ActionReview && (e.VideoID == "spiked" || e.VideoID == "viral"):
		case e.Action == moderation.ActionReview:
			t.Errorf("review of %q: only the spiked and the viral video rise a thousandfold", e.VideoID)
		default:
			flagEntries++
		}
	}
	if flagEntries != 50 {
		t.Errorf("%d audit entries besides reviews, want the ring's 50 flags", flagEntries)
	}

	// The next run reads only what is new (nothing) and flags nobody twice.
	again := run(t, h)
	if again.Flagged != 0 || again.Steps != 0 || again.PartitionSteps != 0 || !again.From.Equal(mark) {
		t.Errorf("second run: %+v", again)
	}

	// A moderator clears one member; a run over the ring's minutes again
	// (every watermark set back before them) finds the group and does not
	// flag that member back.
	if _, err := rs.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: ring[:1], Flagged: false}); err != nil {
		t.Fatal(err)
	}
	back := mark.Add(-45 * time.Minute)
	for back.After(flags[ring[1]].Evidence.WindowStart.Add(-time.Minute)) {
		back = back.Add(-15 * time.Minute)
	}
	var ms []*spanner.Mutation
	for _, name := range append([]string{detectmanipulationfn.Job}, partitionNames(4)...) {
		ms = append(ms, spanner.Update("JobWatermarks", []string{"Name", "Watermark"}, []any{name, back}))
	}
	if _, err := db.Client.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	third := run(t, h)
	if third.Groups != 1 || third.Flagged != 0 {
		t.Errorf("rerun over the same evidence: %+v, want the group found and nobody flagged", third)
	}
	if f := flagged(t, rs); len(f) != 49 || f[ring[0]].UserID != "" {
		t.Errorf("after the moderator's unflag and a rerun: %d flagged, want 49", len(f))
	}
}

func partitionNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, detectmanipulationfn.PartitionName(n, i))
	}
	return out
}

// A step whose candidates exceed the merge's budget is skipped, and the
// skip is counted (the alert's signal); the watermark moves past it.
func TestSkippedStepIsCounted(t *testing.T) {
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	now := time.Now().UTC()
	world := moderationtest.Population{
		Seed: 3, Ordinary: 300, PerUser: 2, Catalogue: 50, NewShare: 0.1,
		Rings: []moderationtest.Ring{{Size: 30, Items: 4, Spread: 5 * time.Minute}},
	}.Generate(now.Add(-10 * time.Minute))
	seed(t, db, world)
	metrics, reader := newMetrics(t)
	s, _ := stores(db)
	deps := newDeps(db, s, now)
	deps.Partitions, deps.MaxCandidates, deps.FirstLookback, deps.Metrics = 2, 100, time.Hour+10*time.Minute, metrics
	rep := run(t, detectmanipulationfn.New(deps))
	if rep.Steps != 2 || rep.SkippedSteps == 0 || rep.Flagged != 0 {
		t.Fatalf("report %+v: want 2 steps merged, some skipped, nobody flagged", rep)
	}
	if got := skipped(t, reader); got["step"] != int64(rep.SkippedSteps) {
		t.Errorf("skips counted %v, want step=%d", got, rep.SkippedSteps)
	}
}

func TestRefusesABody(t *testing.T) {
	h := detectmanipulationfn.New(detectmanipulationfn.Deps{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/internal/detect-manipulation", strings.NewReader(`{"step":"1h"}`)))
	if rec.Code != http.StatusBadRequest || apitest.ReasonOf(rec.Body.Bytes()) != errs.UnknownField {
		t.Fatalf("unknown field: %d %s", rec.Code, rec.Body)
	}
}

// records is an identity provider that knows some accounts' creation.
type records map[string]time.Time

func (r records) Created(_ context.Context, uids []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, u := range uids {
		if t, ok := r[u]; ok {
			out[u] = t
		}
	}
	return out, nil
}

// Ages come from the identity provider's records where it has them: a ring
// whose accounts reacted for the first time today but signed up years ago
// is a group of established accounts, not flagged on 4 items; the accounts
// it has no record of are aged by their first reaction.
func TestAgesFromTheIdentityProvider(t *testing.T) {
	db, now, world := seededRing(t)
	old := records{}
	n := 0
	for u := range world.Ring {
		if n < 25 {
			old[u] = now.AddDate(-3, 0, 0)
		}
		n++
	}
	s, rs := stores(db)
	deps := newDeps(db, s, now)
	deps.Accounts, deps.Partitions, deps.FirstLookback = old, 2, 90*time.Minute
	rep := run(t, detectmanipulationfn.New(deps))
	// The ring is found (its members' ages are asked, once per step that
	// reads it) and judged established: 25 of 30 by the provider.
	if rep.Flagged != 0 || rep.AgesFromProvider == 0 || rep.AgesFromProvider != 5*rep.AgesFromReactions {
		t.Errorf("report %+v: want the ring's 30 aged, 25 by the provider as established, 5 by their reactions, nobody flagged", rep)
	}
	if f := flagged(t, rs); len(f) != 0 {
		t.Errorf("%d accounts flagged, want none", len(f))
	}
}

// killedShare fails SaveMergeShare of one share once, after its count: an
// invocation killed in the middle of a share of the merge.
type killedShare struct {
	detectmanipulationfn.Store
	share int
	once  sync.Once
}

func (k *killedShare) SaveMergeShare(ctx context.Context, stepEnd time.Time, partitions, buckets, share int, ps moderation.PairShare) error {
	killed := false
	if share == k.share {
		k.once.Do(func() { killed = true })
	}
	if killed {
		return errKilled
	}
	return k.Store.SaveMergeShare(ctx, stepEnd, partitions, buckets, share, ps)
}

// An invocation killed in the middle of a share of the merge leaves the
// merge's watermark where it was: the step is merged only once every share
// is saved, and the next invocation counts the missing share and flags the
// ring, once.
func TestAKilledMergeShareIsRedone(t *testing.T) {
	ctx := context.Background()
	db, now, world := seededRing(t)
	s, rs := stores(db)
	h := detectmanipulationfn.New(newDeps(db, &killedShare{Store: s, share: 4}, now))

	killedRun(t, h)
	start := now.Add(-10 * time.Second).Add(-time.Hour).Truncate(time.Minute)
	if mark, err := rs.Watermark(ctx, detectmanipulationfn.Job); err != nil || !mark.Equal(start) {
		t.Fatalf("merge watermark after the killed share: %v (%v), want %v", mark, err, start)
	}
	if got := flagged(t, rs); len(got) != 0 {
		t.Fatalf("%d flagged before every share is counted", len(got))
	}
	saved, err := rs.MergeShares(ctx, start.Add(30*time.Minute), 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := saved[4]; ok || len(saved) >= 6 {
		t.Fatalf("shares saved by the killed run: %v, want at most the five others", slices.Sorted(maps.Keys(saved)))
	}

	rep := run(t, h)
	if rep.Steps != 2 || rep.MergeShares != 2*6-len(saved) {
		t.Errorf("report %+v: want 2 steps merged, counting the %d shares not saved", rep, 2*6-len(saved))
	}
	if got, ring := flaggedOnce(t, db, rs), slices.Sorted(maps.Keys(world.Ring)); !slices.Equal(got, ring) {
		t.Errorf("flagged %d accounts, want the ring's %d", len(got), len(ring))
	}
}

// counting counts what was saved: each partition's steps and each share of
// each step's merge.
type counting struct {
	detectmanipulationfn.Store
	mu       sync.Mutex
	partials map[string]int // by partition and step start
	shares   map[string]int // by step end, layout and share
}

func newCounting(s detectmanipulationfn.Store) *counting {
	return &counting{Store: s, partials: map[string]int{}, shares: map[string]int{}}
}

func (c *counting) SavePartial(ctx context.Context, layout, name string, partitions, part int, from, to time.Time, p moderation.Partial, spikes []moderation.Spike, baseline time.Duration) error {
	err := c.Store.SavePartial(ctx, layout, name, partitions, part, from, to, p, spikes, baseline)
	if err == nil {
		c.mu.Lock()
		c.partials[fmt.Sprintf("%s@%s", name, from.Format(time.RFC3339))]++
		c.mu.Unlock()
	}
	return err
}

func (c *counting) SaveMergeShare(ctx context.Context, stepEnd time.Time, partitions, buckets, share int, ps moderation.PairShare) error {
	err := c.Store.SaveMergeShare(ctx, stepEnd, partitions, buckets, share, ps)
	if err == nil {
		c.mu.Lock()
		c.shares[fmt.Sprintf("%s %d/%d #%d", stepEnd.Format(time.RFC3339), partitions, buckets, share)]++
		c.mu.Unlock()
	}
	return err
}

// runAll runs n invocations of h at once and returns their reports.
func runAll(t *testing.T, h http.Handler, n int) []detectmanipulationfn.Report {
	t.Helper()
	reps := make([]detectmanipulationfn.Report, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			rec := invoke(h)
			if rec.Code != http.StatusOK {
				errs[k] = fmt.Errorf("invocation %d: %d %s", k, rec.Code, rec.Body)
				return
			}
			errs[k] = json.Unmarshal(rec.Body.Bytes(), &reps[k])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return reps
}

// Several invocations at once (the fanned-out jobs' overlapping runs)
// share a step's work under the leases: every partition's step and every
// share of every step's merge is saved exactly once, and the accounts
// flagged are the ones one detection over the reactions flags, each once.
func TestInvocationsAtOnceShareTheSteps(t *testing.T) {
	ctx := context.Background()
	db, now, world := seededRing(t)
	s, rs := stores(db)
	store := newCounting(s)
	h := detectmanipulationfn.New(newDeps(db, store, now))

	start := now.Add(-10 * time.Second).Add(-time.Hour).Truncate(time.Minute)
	want := start.Add(time.Hour)
	// Invocations leave when nothing is left to take up; the next minute's
	// come back for what was held: rounds until the merge is through.
	steps, shares, partitionSteps := 0, 0, 0
	for round := 0; ; round++ {
		for _, rep := range runAll(t, h, 4) {
			steps += rep.Steps
			shares += rep.MergeShares
			partitionSteps += rep.PartitionSteps
		}
		mark, err := rs.Watermark(ctx, detectmanipulationfn.Job)
		if err != nil {
			t.Fatal(err)
		}
		if !mark.Before(want) {
			break
		}
		if round == 5 {
			t.Fatalf("merge watermark %v after %d rounds of 4 invocations, want %v", mark, round+1, want)
		}
	}
	if steps != 2 || shares != 2*6 || partitionSteps != 2*4 {
		t.Errorf("the invocations merged %d steps, counted %d shares and stored %d partition steps; want 2, 12 and 8", steps, shares, partitionSteps)
	}
	for k, n := range store.partials {
		if n != 1 {
			t.Errorf("partition step %s saved %d times", k, n)
		}
	}
	for k, n := range store.shares {
		if n != 1 {
			t.Errorf("merge share %s saved %d times", k, n)
		}
	}
	if len(store.partials) != 8 || len(store.shares) != 12 {
		t.Errorf("%d partition steps and %d shares saved, want 8 and 12", len(store.partials), len(store.shares))
	}

	groups, _, err := moderation.DefaultParams.Detect(world.Reactions, world.FirstSeenOf)
	if err != nil {
		t.Fatal(err)
	}
	var one []string
	for _, g := range groups {
		one = append(one, g.Members...)
	}
	slices.Sort(one)
	one = slices.Compact(one)
	if got := flaggedOnce(t, db, rs); len(one) != len(world.Ring) || !slices.Equal(got, one) {
		t.Errorf("flagged %d accounts, one detection flags %d (the ring has %d)", len(got), len(one), len(world.Ring))
	}
}

// A change of layout between runs is exact: the steps the old layout's
// partitions began (here both steps of the hour, their merge held up by a
// killed share) are merged under it, the new layout's partitions start
// after them, so nothing is read twice (no spike is recorded twice) and the
// ring is flagged once; the steps after are cut by the new layout.
func TestALayoutChangeFinishesTheStepsBegunUnderTheOld(t *testing.T) {
	cfg := emulatortest.New(t)
	ctx := context.Background()
	db := emulatortest.Spanner(t, cfg)
	now := time.Now().UTC()
	world := ringOf30(now)
	start := now.Add(-10 * time.Second).Add(-time.Hour).Truncate(time.Minute)
	spikeAt(&world, "spiked", start.Add(40*time.Minute))
	seed(t, db, world)
	s, rs := stores(db)
	store := newCounting(&killedShare{Store: s, share: 4})
	deps := func(partitions, buckets int, at time.Time) detectmanipulationfn.Deps {
		d := newDeps(db, store, at)
		d.Partitions, d.MergeBuckets = partitions, buckets
		return d
	}

	// Under 4 partitions in 3 buckets: both steps read, the merge killed.
	killedRun(t, detectmanipulationfn.New(deps(4, 3, now)))

	// The next run is configured for 6 partitions in 2 buckets.
	rep := run(t, detectmanipulationfn.New(deps(6, 2, now)))
	ls, ok, err := rs.Layouts(ctx, detectmanipulationfn.LayoutName)
	if err != nil || !ok {
		t.Fatalf("layout record: %+v %v %v", ls, ok, err)
	}
	if wantLs := (moderation.Layouts{Since: start.Add(time.Hour), Current: moderation.Layout{Partitions: 6, Buckets: 2},
		Previous: moderation.Layout{Partitions: 4, Buckets: 3}}); !ls.Since.Equal(wantLs.Since) || ls.Current != wantLs.Current || ls.Previous != wantLs.Previous {
		t.Errorf("layout record %+v, want %+v", ls, wantLs)
	}
	if rep.Steps != 2 || rep.PartitionSteps != 0 {
		t.Errorf("run under the new layout: %+v; want the 2 steps begun merged under the old, no partition step read again", rep)
	}
	oldShares := 0
	for k := range store.shares {
		if strings.Contains(k, " 4/3 #") {
			oldShares++
		}
	}
	if len(store.shares) != 2*6 || oldShares != 2*6 {
		t.Errorf("shares saved %v, want the old layout's 6 of each step", slices.Sorted(maps.Keys(store.shares)))
	}
	if got, ring := flaggedOnce(t, db, rs), slices.Sorted(maps.Keys(world.Ring)); !slices.Equal(got, ring) {
		t.Errorf("flagged %d accounts, want the ring's %d", len(got), len(ring))
	}

	// Half an hour later the new layout reads the next step, from where the
	// old one stopped.
	rep = run(t, detectmanipulationfn.New(deps(6, 2, now.Add(30*time.Minute))))
	if rep.Steps != 1 || rep.PartitionSteps != 6 || rep.MergeShares != 3 {
		t.Errorf("next run: %+v; want one step of 6 partitions merged in 3 shares", rep)
	}
	for k, n := range store.partials {
		if n != 1 {
			t.Errorf("partition step %s saved %d times", k, n)
		}
	}
	if reviews := trail(t, db, moderation.Filter{VideoID: "spiked"}); len(reviews) != 1 {
		t.Errorf("%d entries on the spiked video, want one review", len(reviews))
	}
}

// stale answers the first read of a step's saved shares with none, as a
// read made just before other invocations saved them would, and fails the
// first last stage, as a killed invocation would.
type stale struct {
	detectmanipulationfn.Store
	read, flag sync.Once
}

func (s *stale) MergeShares(ctx context.Context, stepEnd time.Time, partitions, buckets int) (map[int]moderation.PairShare, error) {
	fresh := false
	s.read.Do(func() { fresh = true })
	if fresh {
		return map[int]moderation.PairShare{}, nil
	}
	return s.Store.MergeShares(ctx, stepEnd, partitions, buckets)
}

func (s *stale) FlagGroups(ctx context.Context, groups []moderation.Group, job string, from, to time.Time) (int, error) {
	killed := false
	s.flag.Do(func() { killed = true })
	if killed {
		return 0, errKilled
	}
	return s.Store.FlagGroups(ctx, groups, job, from, to)
}

// A share another invocation saved after this one listed the step's saved
// shares is not counted again once this one holds its lease: every share of
// the step was saved by a run killed in its last stage, the next run reads
// the saved shares as none, and still counts only the next step's.
func TestAShareSavedMeanwhileIsNotCountedAgain(t *testing.T) {
	db, now, world := seededRing(t)
	s, rs := stores(db)
	counted := newCounting(s)
	st := &stale{Store: counted}
	st.read.Do(func() {}) // the killed run reads truly
	h := detectmanipulationfn.New(newDeps(db, st, now))
	killedRun(t, h)
	if len(counted.shares) != 6 {
		t.Fatalf("killed run: %d shares saved, want the first step's 6", len(counted.shares))
	}
	st.read = sync.Once{}
	rep := run(t, h)
	if rep.Steps != 2 || rep.MergeShares != 6 {
		t.Errorf("report %+v: want 2 steps merged, counting only the second step's 6 shares", rep)
	}
	for k, n := range counted.shares {
		if n != 1 {
			t.Errorf("merge share %s saved %d times", k, n)
		}
	}
	if got := flagged(t, rs); len(got) != len(world.Ring) {
		t.Errorf("flagged %d accounts, want the ring's %d", len(got), len(world.Ring))
	}
}
