package reconcilestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
)

// TestRecentRunKilledAndResumed: an hourly run covers the counters that
// folded a change of a reconciled field since the previous run, not those
// that folded views only; killed again and again at different points and
// resumed, it checks each of them once and corrects each drift once. The
// next run overlaps it by an hour, and a run after a missed hour covers the
// missed hour.
func TestRecentRunKilledAndResumed(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 12, 3, 10, 20, 0, 0, time.UTC)
	w := newWorld(t, reconcilestore.Options{ReconcilePage: 40, Now: func() time.Time { return clock }})
	src, keys, drift := seedDrift(t, w, 300)
	var views []counter.Delta
	for i := range 100 {
		views = append(views, counter.Delta{Key: fmt.Sprintf("%c%cview%d", idAlphabet[i*13%64], idAlphabet[i*7%64], i), Field: counter.Views, N: 3})
	}
	if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "views", Kind: events.KindCounterDelta, Deltas: views}}); err != nil {
		t.Fatal(err)
	}
	fold := func() {
		t.Helper()
		if _, err := w.Folds.Fold(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fold()

	run, err := w.Recon.StartRecentRun(ctx, 8)
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
	t.Logf("hourly run of %d moved counters (and %d of views only), killed %d times: %d take-ups, %d batches, %d checked, %d corrected",
		len(keys), len(views), kills, st.Invocations, st.Batches, st.Checked, st.Corrected)
	if kills < 3 {
		t.Errorf("killed %d times; the test means to kill the run at many points", kills)
	}
	if st.Scope != reconcilestore.Recent || st.Checked != len(keys) || st.Corrected != len(drift) || st.Skipped != 0 {
		t.Errorf("after %d kills: %+v; want an hourly run with %d checked, %d corrected, none skipped", kills, st, len(keys), len(drift))
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

	// The next hour's run covers this hour again: everything checked,
	// nothing left to correct (the corrections were not folds).
	clock = clock.Add(time.Hour)
	rep, err := w.Recon.Reconcile(ctx, reconcilestore.Recent, []reconcilestore.Source{src})
	if err != nil || !rep.Done || rep.Checked != len(keys) || rep.Corrected != 0 {
		t.Errorf("the next hour's run: %+v, %v; want %d checked, none corrected", rep, err, len(keys))
	}

	// No run in the hour after: a counter that moved then is covered by
	// the run after, and one that moved in the run's own hour too; the
	// counters of two hours before are not.
	clock = clock.Add(time.Hour)
	move := func(key string, likes int64) {
		t.Helper()
		src.truth[key] = likes - 1
		if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "move-" + key, Kind: events.KindCounterDelta,
			Deltas: []counter.Delta{{Key: key, Field: counter.Likes, N: likes}}}}); err != nil {
			t.Fatal(err)
		}
		fold()
	}
	move("missed-hour", 5)
	clock = clock.Add(time.Hour)
	move("this-hour", 7)
	rep, err = w.Recon.Reconcile(ctx, reconcilestore.Recent, []reconcilestore.Source{src})
	if err != nil || !rep.Done || rep.Checked != 2 || rep.Corrected != 2 {
		t.Errorf("the run after a missed hour: %+v, %v; want the 2 counters moved since checked and corrected", rep, err)
	}
}
