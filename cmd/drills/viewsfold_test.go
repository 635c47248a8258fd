package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/cmd/soak/workload"
	rollupfn "github.com/videngage/engagement/functions/rollup"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/viewstore"
)

// Drill 2b. The rollup's views fold dies before its Spanner commit, and
// after its commit but before it deleted the staged batches it counted,
// under load with history deletes. The next folds count the first batches
// and find the second counted, and only delete them: views and unique
// viewers stay exact (settle), and nothing stays staged.
//
// The fold's instance is this process, so its death is the rest of the
// fold not running: the probe fails the commit, or the deletion, and the
// fold returns, as a killed instance's fold would stop there; the next
// scheduled fold starts from what is stored, as a new instance's does.
func TestDrillViewsFoldCrashes(t *testing.T) {
	// The first fold that finds batches dies before its commit, so the
	// second finds them still staged and dies after its commit: both
	// crashes come as soon as one view is staged, however few views the
	// viewing window leaves the load (a watcher counts once per video).
	fp := &foldProbe{beforeAt: 1, afterAt: 2}
	st := startStack(t, stackOptions{viewsFold: fp})
	l := startLoad(st, workload.Spec{HistoryDeletes: true, Reactors: 2, Watchers: 4, Keys: keys(4), Pace: 50 * time.Millisecond})
	// The folds' pace is the machine's: fail only when they stop coming,
	// not after a total time.
	for seen, progress := 0, time.Now(); !fp.crashedBoth(); time.Sleep(200 * time.Millisecond) {
		if errs := l.Errors(); len(errs) > 0 {
			finish(t, l)
			t.Fatalf("the load stopped before the views fold's planned crashes (%d folds with batches)", seen)
		}
		if n := fp.foldsWithBatches(); n > seen {
			seen, progress = n, time.Now()
		}
		if time.Since(progress) > 2*time.Minute {
			t.Fatalf("the views fold stopped before its planned crashes: no fold with batches for 2 min, %d so far", seen)
		}
	}
	time.Sleep(2 * time.Second)
	finish(t, l)
	st.settle(t, l.Model)
	checkAnswers(t, l.Rec.Samples(), st.cfg.HTTP.RequestTimeout)
	fp.check(t)
	left, err := fp.inner.List(context.Background(), 0, counter.Parts, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%d batches still staged after the pipeline converged", len(left))
	}
}

var errFoldGone = errors.New("the fold's instance died")

// foldProbe is the views fold's staging and counter store: the fold that
// lists batches for the beforeAt-th time dies before its commit, the
// afterAt-th after its commit and before its deletion.
type foldProbe struct {
	inner    *viewstore.Staging
	counters views.Counters
	beforeAt int
	afterAt  int

	mu       sync.Mutex
	folds    int
	dying    string // how the fold under way dies: "before", "after" or ""
	before   int    // batches whose fold died before its commit
	crashed  map[string]bool
	relisted map[string]bool // crashed batches listed again by a later fold
	recount  int             // events of crashed batches that a later fold counted again
}

func (p *foldProbe) List(ctx context.Context, lo, hi, limit int) ([]views.Batch, error) {
	bs, err := p.inner.List(ctx, lo, hi, limit)
	if err != nil || len(bs) == 0 {
		return bs, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.folds++
	p.dying = ""
	switch p.folds {
	case p.beforeAt:
		p.dying, p.before = "before", len(bs)
	case p.afterAt:
		p.dying = "after"
	}
	for _, b := range bs {
		if p.crashed[b.Key] {
			p.relisted[b.Key] = true
		}
	}
	return bs, nil
}

func (p *foldProbe) Apply(ctx context.Context, evs []events.Event) (counter.ApplyStats, error) {
	p.mu.Lock()
	dying := p.dying
	p.mu.Unlock()
	if dying == "before" {
		return counter.ApplyStats{}, errFoldGone
	}
	return p.counters.Apply(ctx, evs)
}

func (p *foldProbe) Delete(ctx context.Context, bs []views.Batch) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dying == "after" {
		for _, b := range bs {
			p.crashed[b.Key] = true
		}
		return errFoldGone
	}
	return p.inner.Delete(ctx, bs)
}

func (p *foldProbe) foldsWithBatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.folds
}

func (p *foldProbe) crashedBoth() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.before > 0 && len(p.crashed) > 0
}

func (p *foldProbe) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("views fold: %d folds with batches; one died before its commit (%d batches), one after its commit (%d batches), %d of them listed again",
		p.folds, p.before, len(p.crashed), len(p.relisted))
	if len(p.relisted) != len(p.crashed) {
		t.Errorf("%d of the %d batches counted by the fold that died were never listed again", len(p.crashed)-len(p.relisted), len(p.crashed))
	}
}

// rollupWithViewsFold is the Rollup handler with its views fold through p.
func (st *drillStack) rollupWithViewsFold(p *foldProbe) http.Handler {
	p.inner = viewstore.NewStaging(st.clients.BigtableTx)
	p.counters = st.outbox
	p.crashed, p.relisted = map[string]bool{}, map[string]bool{}
	return rollupfn.New(rollupfn.Deps{
		Store:         rollupfn.Stores(st.folds, st.outbox, leasestore.New(st.db, nil)),
		Publisher:     bus.NewPublisher(st.clients.PubSub, st.cfg.PubSub.CounterTopic),
		Interval:      st.cfg.Counters.RollupInterval,
		RelayAfter:    st.cfg.Counters.RelayAfter,
		Views:         rollupfn.FoldViews(p, p),
		ViewsInterval: st.cfg.Counters.ViewsFoldInterval,
	})
}
