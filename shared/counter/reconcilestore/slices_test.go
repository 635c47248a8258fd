package reconcilestore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/countertest"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
)

const idAlphabet = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"

// killer passes through to a source and cancels the invocation at its
// at-th recount: the invocation dies with a batch read and not written, or
// (when the cancel lands in the commit) written and not reported.
type killer struct {
	*source
	calls  atomic.Int64
	at     int64
	cancel context.CancelFunc
}

func (k *killer) Truth(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error) {
	if k.calls.Add(1) == k.at {
		k.cancel()
	}
	return k.source.Truth(ctx, tx, keys)
}

// seedDrift writes n counters over the whole key space whose truth is i
// likes, every seventh counted two likes too many; it returns the keys and
// the drifted ones.
func seedDrift(t *testing.T, w *countertest.Stores, n int) (*source, []string, map[string]bool) {
	t.Helper()
	src := &source{name: "likes", field: counter.Likes, truth: map[string]int64{}}
	var keys []string
	drift := map[string]bool{}
	var deltas []counter.Delta
	for i := range n {
		k := fmt.Sprintf("%c%c%d", idAlphabet[i*37%64], idAlphabet[i*11%64], i)
		keys = append(keys, k)
		src.truth[k] = int64(i + 1)
		have := int64(i + 1)
		if i%7 == 3 {
			have += 2
			drift[k] = true
		}
		deltas = append(deltas, counter.Delta{Key: k, Field: counter.Likes, N: have})
	}
	if _, err := w.Outbox.Apply(context.Background(), []events.Event{{ID: "seed", Kind: events.KindCounterDelta, Deltas: deltas}}); err != nil {
		t.Fatal(err)
	}
	return src, keys, drift
}

func newWorld(t *testing.T, o reconcilestore.Options) *countertest.Stores {
	t.Helper()
	return countertest.New(emulatortest.Spanner(t, emulatortest.New(t)), o)
}

// TestReconcileKilledAndResumed kills a run of every counter again and
// again at different points (one batch's recount each time) and resumes it
// with a new invocation: in the end every counter was checked exactly once,
// every drift corrected and counted exactly once, and the counts are right.
func TestReconcileKilledAndResumed(t *testing.T) {
	w := newWorld(t, reconcilestore.Options{ReconcilePage: 40})
	src, keys, drift := seedDrift(t, w, 600)
	ctx := context.Background()
	run, err := w.Recon.StartRun(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	kills := 0
	for cycle := 0; ; cycle++ {
		if cycle > 100 {
			t.Fatal("the run does not finish")
		}
		st, err := w.Recon.Run(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if st.Done() {
			break
		}
		ictx, cancel := context.WithCancel(ctx)
		k := &killer{source: src, at: int64(1 + cycle*3%5), cancel: cancel}
		_, err = w.Recon.WorkSlices(ictx, []reconcilestore.Source{k}, reconcilestore.WorkOptions{Run: run})
		if ictx.Err() != nil {
			kills++
		} else if err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	st, err := w.Recon.Run(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run of %d counters in %d slices, killed %d times: %d slice take-ups, %d batches, %d checked, %d corrected (%d drifted)",
		len(keys), st.Slices, kills, st.Invocations, st.Batches, st.Checked, st.Corrected, len(drift))
	if kills < 5 {
		t.Errorf("killed %d times; the test means to kill the run at many points", kills)
	}
	if st.Checked != len(keys) || st.Corrected != len(drift) || st.Skipped != 0 || st.Slices != 8 {
		t.Errorf("after %d kills: %+v; want %d checked, %d corrected, none skipped", kills, st, len(keys), len(drift))
	}
	if st.Invocations <= st.Slices {
		t.Errorf("%d slices taken up %d times: the kills did not interrupt any slice", st.Slices, st.Invocations)
	}
	for i, want := range []bool{true, false} {
		if _, closed, err := w.Recon.CloseRun(ctx, run); err != nil || closed != want {
			t.Errorf("close #%d of the finished run: %v, %v; want %v (reported once)", i+1, closed, err, want)
		}
	}
	counted, pending, err := w.Counts.Totals(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got := counted[k].Likes + pending[k].Likes; got != src.truth[k] {
			t.Errorf("%s: %d likes, truth %d", k, got, src.truth[k])
		}
	}
	rep, err := w.Recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{src})
	if err != nil || rep.Corrected != 0 || rep.Checked != len(keys) || !rep.Done {
		t.Errorf("a second run: %+v, %v; want every key checked and nothing to correct", rep, err)
	}
}

// TestReconcileSliceOfDeadWorker: a slice whose worker died holding its
// lease is resumed by another invocation once the lease expires, and not
// before.
func TestReconcileSliceOfDeadWorker(t *testing.T) {
	const lease = 500 * time.Millisecond
	w := newWorld(t, reconcilestore.Options{SliceLease: lease})
	src, keys, drift := seedDrift(t, w, 100)
	ctx := context.Background()
	run, err := w.Recon.StartRun(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := w.Leases.Lease(ctx, reconcilestore.SliceLeaseName(run, 0), "dead", lease); err != nil || !ok {
		t.Fatal(ok, err)
	}
	taken := time.Now()
	rep, err := w.Recon.WorkSlices(ctx, []reconcilestore.Source{src}, reconcilestore.WorkOptions{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(taken) < lease && (rep.Held != 1 || rep.Finished != 1) {
		t.Errorf("beside a live lease: %+v; want one slice held, the other finished", rep)
	}
	for {
		st, err := w.Recon.Run(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if st.Done() {
			if time.Since(taken) < lease {
				t.Errorf("the dead worker's slice was worked before its lease expired")
			}
			if st.Checked != len(keys) || st.Corrected != len(drift) {
				t.Errorf("%+v; want %d checked, %d corrected", st, len(keys), len(drift))
			}
			return
		}
		if time.Since(taken) > 30*time.Second {
			t.Fatalf("the dead worker's slice is never resumed: %+v", st)
		}
		if _, err := w.Recon.WorkSlices(ctx, []reconcilestore.Source{src}, reconcilestore.WorkOptions{Run: run}); err != nil {
			t.Fatal(err)
		}
	}
}
