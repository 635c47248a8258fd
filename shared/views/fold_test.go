package views_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/viewstore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// stores are the counters' consumer, their reads and the staging table of
// cfg's world.
func stores(t *testing.T, cfg *config.Config) (*outboxstore.Store, *countstore.Store, *viewstore.Staging) {
	t.Helper()
	db := emulatortest.Spanner(t, cfg)
	return outboxstore.New(db), countstore.New(db), viewstore.NewStaging(emulatortest.Bigtable(t, cfg))
}

// deadAfterCommit is a staging whose deletions fail while dead is set: a
// fold whose instance dies after its Spanner commit, before its rows are
// deleted.
type deadAfterCommit struct {
	views.Staging
	dead bool
}

var errGone = errors.New("instance gone")

func (d *deadAfterCommit) Delete(ctx context.Context, bs []views.Batch) error {
	if d.dead {
		return errGone
	}
	return d.Staging.Delete(ctx, bs)
}

// deadBeforeCommit is a counter store whose transactions never run while
// dead is set: a fold whose instance dies before its commit.
type deadBeforeCommit struct {
	views.Counters
	dead bool
}

func (d *deadBeforeCommit) Apply(ctx context.Context, evs []events.Event) (counter.ApplyStats, error) {
	if d.dead {
		return counter.ApplyStats{}, errGone
	}
	return d.Counters.Apply(ctx, evs)
}

// viewEvents is a batch's events: n views of video by n viewers of the
// batch's own.
func viewEvents(batch, video string, n int) []events.Event {
	e := events.Event{ID: events.ID("views", batch, "0"), Kind: events.KindCounterDelta,
		Deltas: []counter.Delta{{Key: video, Field: counter.Views, N: int64(n)}}, Viewers: map[string][]uint64{}}
	for i := range n {
		e.Viewers[video] = append(e.Viewers[video], history.NewViewerHasher("test").Hash(fmt.Sprintf("%s-viewer-%d", batch, i)))
	}
	return []events.Event{e}
}

// A fold counts every staged batch once and deletes it, whether it dies
// before its commit, after its commit and before the deletion, or a batch is
// staged again after its fold.
func TestFoldCountsEachBatchOnce(t *testing.T) {
	ctx := context.Background()
	cfg := emulatortest.New(t)
	store, counts, staging := stores(t, cfg)
	all := views.FoldOptions{Hi: counter.Parts}
	put := func(batch, video string, n int) {
		t.Helper()
		if err := staging.Put(ctx, batch, viewEvents(batch, video, n)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, want map[string]int64) {
		t.Helper()
		var ids []string
		for id := range want {
			ids = append(ids, id)
		}
		got, err := counts.Counts(ctx, ids, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for id, w := range want {
			if v := got.Values[id]; v.Views != w || v.UniqueViewers != w {
				t.Errorf("%s: %s has %d views, %d unique viewers; want %d of each", when, id, v.Views, v.UniqueViewers, w)
			}
		}
	}
	staged := func() int {
		t.Helper()
		bs, err := staging.List(ctx, 0, counter.Parts, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(bs)
	}

	put("a", "v1", 3)
	put("a", "v1", 3) // redelivered before the fold: the same row
	put("b", "v1", 2)
	put("c", "v2", 1)
	if n := staged(); n != 3 {
		t.Fatalf("%d staged batches, want 3", n)
	}
	check("staged, not folded", map[string]int64{"v1": 0, "v2": 0})

	// Dies before its commit: nothing counted, everything still staged.
	dc := &deadBeforeCommit{Counters: store, dead: true}
	if _, err := views.Fold(ctx, staging, dc, all); !errors.Is(err, errGone) {
		t.Fatalf("fold dead before its commit: %v", err)
	}
	check("fold died before its commit", map[string]int64{"v1": 0, "v2": 0})

	// Dies after its commit, before the deletion: counted, still staged.
	ds := &deadAfterCommit{Staging: staging, dead: true}
	st, err := views.Fold(ctx, ds, store, all)
	if !errors.Is(err, errGone) || st.Applied != 3 || st.Commits != 1 {
		t.Fatalf("fold dead after its commit: %+v, %v; want 3 events applied in 1 commit, then the error", st, err)
	}
	check("fold died after its commit", map[string]int64{"v1": 5, "v2": 1})
	if n := staged(); n != 3 {
		t.Fatalf("%d staged batches after the fold died, want the 3 still there", n)
	}

	// The next fold finds them counted and only deletes them.
	st, err = views.Fold(ctx, staging, store, all)
	if err != nil || st.Batches != 3 || st.Applied != 0 || st.Duplicates != 3 {
		t.Fatalf("fold after the death: %+v, %v; want 3 batches, 0 applied, 3 duplicates", st, err)
	}
	check("the next fold", map[string]int64{"v1": 5, "v2": 1})
	if n := staged(); n != 0 {
		t.Fatalf("%d staged batches after the fold, want 0", n)
	}

	// A late redelivery stages a folded batch again: refused, deleted.
	put("b", "v1", 2)
	put("d", "v2", 4)
	st, err = views.Fold(ctx, staging, store, all)
	if err != nil || st.Applied != 1 || st.Duplicates != 1 {
		t.Fatalf("fold of a late redelivery and a new batch: %+v, %v; want 1 applied, 1 duplicate", st, err)
	}
	check("a late redelivery", map[string]int64{"v1": 5, "v2": 5})
	if n := staged(); n != 0 {
		t.Fatalf("%d staged batches, want 0", n)
	}
}

// Many batches of many videos fold in few commits, each under the
// per-commit bound; a partition folds only its own batches.
func TestFoldGroupsAndPartitions(t *testing.T) {
	ctx := context.Background()
	cfg := emulatortest.New(t)
	store, counts, staging := stores(t, cfg)
	// 300 batches of 16 videos (one event each): 4,800 deltas, three
	// commits under the bound of 2,000.
	const batches, videos = 300, 16
	for i := range batches {
		id := fmt.Sprintf("batch-%d", i)
		e := events.Event{ID: events.ID("views", id, "0"), Kind: events.KindCounterDelta, Viewers: map[string][]uint64{}}
		for v := range videos {
			key := fmt.Sprintf("video-%02d", v)
			e.Deltas = append(e.Deltas, counter.Delta{Key: key, Field: counter.Views, N: 1})
			e.Viewers[key] = []uint64{history.NewViewerHasher("test").Hash(id)}
		}
		if err := staging.Put(ctx, id, []events.Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	// Partition 0 of 2 first, then 1: disjoint, together everything.
	var total views.FoldStats
	for p := range 2 {
		lo, hi, err := counter.PartRange(p, 2)
		if err != nil {
			t.Fatal(err)
		}
		st, err := views.Fold(ctx, staging, store, views.FoldOptions{Lo: lo, Hi: hi})
		if err != nil {
			t.Fatal(err)
		}
		if st.Batches == 0 || st.Batches == batches {
			t.Errorf("partition %d of 2 folded %d of %d batches: the parts do not split them", p, st.Batches, batches)
		}
		total.Batches += st.Batches
		total.Applied += st.Applied
		total.Commits += st.Commits
	}
	if total.Batches != batches || total.Applied != batches || total.Commits < 3 || total.Commits > 4 {
		t.Errorf("folded %+v; want %d batches applied in 3 or 4 commits", total, batches)
	}
	got, err := counts.Counts(ctx, []string{"video-00", "video-15"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range got.Values {
		if v.Views != batches || v.UniqueViewers != batches {
			t.Errorf("%s: %d views, %d unique viewers; want %d", k, v.Views, v.UniqueViewers, batches)
		}
	}
}

// StagedBefore lists the batches staged before a time and still waiting,
// not those staged after it; a batch staged again counts from its last put.
func TestStagedBefore(t *testing.T) {
	ctx := context.Background()
	cfg := emulatortest.New(t)
	_, _, staging := stores(t, cfg)
	put := func(batch string) time.Time {
		t.Helper()
		if err := staging.Put(ctx, batch, viewEvents(batch, "v-"+batch, 1)); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		// The next put lands in a later millisecond (the cells' resolution).
		for time.Since(at) < 2*time.Millisecond {
		}
		return at
	}
	keys := func(bs []views.Batch, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range bs {
			out = append(out, b.Key)
		}
		slices.Sort(out)
		return out
	}
	put("old")
	cut := put("again").Add(time.Millisecond)
	put("new")
	before := []string{viewstore.RowKey("again"), viewstore.RowKey("old")}
	slices.Sort(before)
	if got := keys(staging.StagedBefore(ctx, 0, counter.Parts, cut, 100)); !slices.Equal(got, before) {
		t.Errorf("staged before the cut: %v, want %v", got, before)
	}
	put("again") // a redelivery stages it anew
	want := []string{viewstore.RowKey("old")}
	if got := keys(staging.StagedBefore(ctx, 0, counter.Parts, cut, 100)); !slices.Equal(got, want) {
		t.Errorf("staged before the cut after a batch was staged again: %v, want %v", got, want)
	}
	if got := keys(staging.List(ctx, 0, counter.Parts, 100)); len(got) != 3 {
		t.Errorf("List: %v, want all 3 batches", got)
	}
}
