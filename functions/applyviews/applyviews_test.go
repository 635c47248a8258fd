package applyviewsfn_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	applyviewsfn "github.com/videngage/engagement/functions/applyviews"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/viewstore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// push delivers a message of data to h and returns what Pub/Sub does with it.
func push(t *testing.T, h http.Handler, id string, data []byte) pushtest.Outcome {
	t.Helper()
	return pushtest.Deliver(t, h, bus.Message{ID: id, Data: data}, "history-views")
}

// crashing fails the first n calls after the claims are written: an
// instance that dies between its Bigtable claims and its stage (or count),
// or that stages (or counts) and dies before the ack (after = true).
type crashing struct {
	inner applyviewsfn.Views
	n     int
	after bool
}

func (c *crashing) Put(ctx context.Context, batchID string, evs []events.Event) error {
	if c.n > 0 {
		c.n--
		if c.after {
			if err := c.inner.Put(ctx, batchID, evs); err != nil {
				return err
			}
		}
		return errors.New("instance gone")
	}
	return c.inner.Put(ctx, batchID, evs)
}

// Views are exact through redelivery, replay, re-publish, a crash before or
// after the stage (or the commit) and a client's retry of a watch in another
// batch; unique viewers count users, not watches. Folded, the rollup's
// views fold counts the staged batches before each check.
func TestViewsCountOncePerWatch(t *testing.T) {
	for _, mode := range []string{"folded", "direct"} {
		t.Run(mode, func(t *testing.T) { testViewsCountOncePerWatch(t, mode == "folded") })
	}
}

func testViewsCountOncePerWatch(t *testing.T, folded bool) {
	cfg := emulatortest.New(t)
	c, err := host.New(context.Background(), cfg, host.NeedSpanner|host.NeedBigtable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	store, err := counterstore.Consumer(spannerdb.Wrap(c.Spanner, c.Config), c.Config.Counters)
	if err != nil {
		t.Fatal(err)
	}
	staging := viewstore.NewStaging(c.BigtableTx)
	var sink applyviewsfn.Views = applyviewsfn.Direct{Counters: store}
	if folded {
		sink = staging
	}
	counters := &crashing{inner: sink}
	fn := applyviewsfn.New(historystore.NewClaims(c.BigtableTx), counters, nil)
	at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	watch := func(user, video string, min int) history.Watch {
		return history.NewWatch(user, video, at.Add(time.Duration(min)*time.Minute), 0)
	}
	deliver := func(b history.Batch) pushtest.Outcome {
		t.Helper()
		data, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return push(t, fn, b.ID, data)
	}
	mustDeliver := func(b history.Batch) {
		t.Helper()
		if got := deliver(b); got != pushtest.Acked {
			t.Fatalf("batch %s: %v", b.ID, got)
		}
	}
	check := func(when string, want map[string][2]int64) {
		t.Helper()
		if folded {
			if _, err := views.Fold(context.Background(), staging, store, views.FoldOptions{Hi: viewstore.Parts}); err != nil {
				t.Fatal(err)
			}
		}
		var ids []string
		for id := range want {
			ids = append(ids, id)
		}
		got, err := store.Counts(context.Background(), ids, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for id, w := range want {
			if got.Values[id].Views != w[0] || got.Values[id].UniqueViewers != w[1] {
				t.Errorf("%s: %s has %d views, %d unique viewers; want %d and %d", when, id, got.Values[id].Views, got.Values[id].UniqueViewers, w[0], w[1])
			}
		}
	}

	// Batch 1: ann twice on v1 (two watch times), bob on v1 and v2.
	b1 := history.NewBatch([]history.Watch{watch("ann", "v1", 0), watch("ann", "v1", 1), watch("bob", "v1", 0), watch("bob", "v2", 0)})
	mustDeliver(b1)
	mustDeliver(b1) // redelivered
	check("batch 1 delivered twice", map[string][2]int64{"v1": {3, 2}, "v2": {1, 1}})

	// Batch 2 carries a client's retry of ann's first watch, and a new one:
	// its count crashes after the claims, then it is redelivered.
	b2 := history.NewBatch([]history.Watch{watch("ann", "v1", 0), watch("cat", "v1", 0)})
	counters.n = 1
	if got := deliver(b2); got != pushtest.Retried {
		t.Fatalf("a failed count: %v, want redelivered", got)
	}
	check("batch 2 crashed before its commit", map[string][2]int64{"v1": {3, 2}})
	// Meanwhile cat retries alone (a batch of one): b2 claimed it first.
	mustDeliver(history.NewBatch([]history.Watch{watch("cat", "v1", 0)}))
	check("cat's retry before batch 2's redelivery", map[string][2]int64{"v1": {3, 2}})
	mustDeliver(b2)
	check("batch 2 redelivered", map[string][2]int64{"v1": {4, 3}})

	// Batch 3 commits, then its instance dies before the ack.
	b3 := history.NewBatch([]history.Watch{watch("dan", "v2", 5), watch("dan", "v2", 6)})
	counters.n, counters.after = 1, true
	if got := deliver(b3); got != pushtest.Retried {
		t.Fatalf("the crash after the commit: %v, want redelivered", got)
	}
	counters.after = false
	mustDeliver(b3)
	check("batch 3 committed, then redelivered", map[string][2]int64{"v2": {3, 2}})

	// A batch naming more videos than one event holds.
	var many []history.Watch
	for i := range 40 {
		many = append(many, watch(fmt.Sprintf("m%d", i), fmt.Sprintf("many-%02d", i%20), i))
	}
	big := history.NewBatch(many)
	mustDeliver(big)
	mustDeliver(big)
	check("40 watches of 20 videos", map[string][2]int64{"many-00": {2, 2}, "many-19": {2, 2}})

	// The form published before batches: one watch, counted once.
	old, _ := watch("eve", "v2", 9).Encode()
	for range 2 {
		if got := push(t, fn, "old", old); got != pushtest.Acked {
			t.Fatal(got)
		}
	}
	check("a single-watch message delivered twice", map[string][2]int64{"v2": {4, 3}})

	for _, bad := range []string{`not json`, `{"batchId":"x","watches":[]}`, `{"batchId":"","watches":[{}]}`} {
		if got := push(t, fn, "bad", []byte(bad)); got != pushtest.Refused {
			t.Errorf("poison %q: %v, want refused as poison", bad, got)
		}
	}
}

// Deliveries served at once on one instance count as one at a time: every
// batch pushed several times concurrently, and the batches sharing watches
// (a client's retries in other batches), leave each watch counted once.
func TestConcurrentDeliveriesCountOnce(t *testing.T) {
	for _, mode := range []string{"folded", "direct"} {
		t.Run(mode, func(t *testing.T) {
			cfg := emulatortest.New(t)
			c, err := host.New(context.Background(), cfg, host.NeedSpanner|host.NeedBigtable)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			store, err := counterstore.Consumer(spannerdb.Wrap(c.Spanner, c.Config), c.Config.Counters)
			if err != nil {
				t.Fatal(err)
			}
			staging := viewstore.NewStaging(c.BigtableTx)
			var sink applyviewsfn.Views = applyviewsfn.Direct{Counters: store}
			if mode == "folded" {
				sink = staging
			}
			fn := applyviewsfn.New(historystore.NewClaims(c.BigtableTx), sink, nil)
			at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
			// 8 users watch "hot" once each; batch i carries users i and
			// i+1, so every watch but the first and last is in two batches.
			var batches []history.Batch
			for i := range 8 {
				ws := []history.Watch{history.NewWatch(fmt.Sprintf("u%d", i), "hot", at, 0)}
				if i+1 < 8 {
					ws = append(ws, history.NewWatch(fmt.Sprintf("u%d", i+1), "hot", at, 0))
				}
				batches = append(batches, history.NewBatch(ws))
			}
			var wg sync.WaitGroup
			outcomes := make(chan pushtest.Outcome, len(batches)*3)
			for _, b := range batches {
				data, err := b.Encode()
				if err != nil {
					t.Fatal(err)
				}
				for range 3 {
					wg.Go(func() { outcomes <- push(t, fn, b.ID, data) })
				}
			}
			wg.Wait()
			close(outcomes)
			for got := range outcomes {
				if got != pushtest.Acked {
					t.Fatalf("a concurrent delivery: %v", got)
				}
			}
			if mode == "folded" {
				if _, err := views.Fold(context.Background(), staging, store, views.FoldOptions{Hi: viewstore.Parts}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := store.Counts(context.Background(), []string{"hot"}, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if v := got.Values["hot"]; v.Views != 8 || v.UniqueViewers != 8 {
				t.Fatalf("hot: %d views, %d unique viewers after 24 concurrent deliveries of 8 watches; want 8 and 8", v.Views, v.UniqueViewers)
			}
		})
	}
}

// ViewEvents are the same on every delivery and valid counter events.
func TestViewEventsDeterministic(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ws []history.Watch
	for i := range 50 {
		ws = append(ws, history.NewWatch(fmt.Sprintf("u%d", i%9), fmt.Sprintf("v%02d", i%18), at.Add(time.Duration(i)*time.Second), 0))
	}
	a := applyviewsfn.ViewEvents("b", ws)
	rev := append([]history.Watch(nil), ws...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	b := applyviewsfn.ViewEvents("b", rev)
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("%d and %d events for 18 videos, want 2", len(a), len(b))
	}
	var views int64
	for i := range a {
		if a[i].ID != b[i].ID || len(a[i].Deltas) != len(b[i].Deltas) {
			t.Fatalf("event %d differs with the order of the watches: %+v vs %+v", i, a[i], b[i])
		}
		if err := (events.Message{V: events.Version, Events: a}).Validate(); err != nil {
			t.Fatal(err)
		}
		for _, d := range a[i].Deltas {
			views += d.N
		}
	}
	if views != 50 {
		t.Errorf("%d views for 50 watches", views)
	}
}
