package applyviewsfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	applyviewsfn "github.com/videngage/engagement/functions/applyviews"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/views"
	"github.com/videngage/engagement/shared/views/claimstore"
	"github.com/videngage/engagement/shared/views/viewstore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

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

// received is a watch of the video by the user dated `dated` before its
// receipt at recv: what History publishes for a request accepted at recv.
func received(user, video string, recv time.Time, dated time.Duration) history.Watch {
	w := history.NewWatch(user, video, recv.Add(-dated), 0)
	w.RecordedAt = recv
	return w
}

// windows returns two times a viewing window apart in the past, so that no
// watch of a test is dated in the future: a watch received at w0 and one
// received at w1 are two views.
func windows(window time.Duration) (w0, w1 time.Time) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return now.Add(-2 * window), now.Add(-window)
}

// viewsWorld is ApplyViews on the emulators, with a way to read the counts.
type viewsWorld struct {
	fn     http.Handler
	sink   *crashing
	check  func(t *testing.T, when string, want map[string][2]int64)
	window time.Duration
	flags  *moderationstore.Store
}

func newViewsWorld(t *testing.T, maxPerHour int64) *viewsWorld {
	return newViewsWorldOf(t, maxPerHour, nil)
}

// newViewsWorldOf is newViewsWorld whose accounts are judged young by young
// (nil: none is), and flagged by the world's flags, as deployed.
func newViewsWorldOf(t *testing.T, maxPerHour int64, young applyviewsfn.Young) *viewsWorld {
	cfg := emulatortest.New(t)
	c, err := host.New(context.Background(), cfg, host.NeedSpanner|host.NeedBigtable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	db := spannerdb.Wrap(c.Spanner, c.Config)
	store, counts := outboxstore.New(db), countstore.New(db)
	staging := viewstore.NewStaging(c.BigtableTx)
	w := &viewsWorld{sink: &crashing{inner: staging}, window: c.Config.History.ViewWindow, flags: moderationstore.New(db, moderationstore.Gate{})}
	var velocity *applyviewsfn.VelocityCheck
	if maxPerHour > 0 {
		velocity = &applyviewsfn.VelocityCheck{Counter: historystore.NewVelocity(c.BigtableTx), Flagger: w.flags,
			Params: moderation.ViewVelocity{MaxPerHour: maxPerHour}}
	}
	who := applyviewsfn.Eligibility{Flags: w.flags, Young: young}
	w.fn = applyviewsfn.New(claimstore.NewClaims(c.BigtableTx, w.window), w.sink, history.NewViewerHasher("test"), who, velocity, nil)
	w.check = func(t *testing.T, when string, want map[string][2]int64) {
		t.Helper()
		if _, err := views.Fold(context.Background(), staging, store, views.FoldOptions{Hi: counter.Parts}); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for id := range want {
			ids = append(ids, id)
		}
		got, err := counts.Counts(context.Background(), ids, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for id, w := range want {
			if got.Values[id].Views != w[0] || got.Values[id].UniqueViewers != w[1] {
				t.Errorf("%s: %s has %d views, %d unique viewers; want %d and %d", when, id, got.Values[id].Views, got.Values[id].UniqueViewers, w[0], w[1])
			}
		}
	}
	return w
}

func (w *viewsWorld) deliver(t *testing.T, b history.Batch) pushtest.Outcome {
	t.Helper()
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return push(t, w.fn, b.ID, data)
}

func (w *viewsWorld) mustDeliver(t *testing.T, b history.Batch) {
	t.Helper()
	if got := w.deliver(t, b); got != pushtest.Acked {
		t.Fatalf("batch %s: %v", b.ID, got)
	}
}

// Views are exact through redelivery, replay, re-publish, a crash before or
// after the stage and a client's retry of a watch in another
// batch; a user's watches of a video count one view per viewing window, and
// a backdated watch none; unique viewers count users, not watches. The
// rollup's views fold counts the staged batches before each check.
func TestViewsCountOncePerWindow(t *testing.T) {
	w := newViewsWorld(t, 0)
	w0, w1 := windows(w.window)
	at := func(start time.Time, min int) time.Time { return start.Add(time.Duration(min) * time.Minute) }

	// Batch 1, in window 0: ann twice on v1 (a replay: one view), bob on
	// v1 and v2.
	b1 := history.NewBatch([]history.Watch{
		received("ann", "v1", at(w0, 1), 0), received("ann", "v1", at(w0, 2), 0),
		received("bob", "v1", at(w0, 1), time.Minute), received("bob", "v2", at(w0, 1), 0)})
	w.mustDeliver(t, b1)
	w.mustDeliver(t, b1) // redelivered
	w.check(t, "batch 1 delivered twice", map[string][2]int64{"v1": {2, 2}, "v2": {1, 1}})

	// Batch 2 carries a client's retry of ann's first watch, and a new one:
	// its count crashes after the claims, then it is redelivered.
	b2 := history.NewBatch([]history.Watch{received("ann", "v1", at(w0, 3), 2*time.Minute), received("cat", "v1", at(w0, 3), 0)})
	w.sink.n = 1
	if got := w.deliver(t, b2); got != pushtest.Retried {
		t.Fatalf("a failed count: %v, want redelivered", got)
	}
	w.check(t, "batch 2 crashed before its commit", map[string][2]int64{"v1": {2, 2}})
	// Meanwhile cat retries alone (a batch of one): b2 claimed it first.
	w.mustDeliver(t, history.NewBatch([]history.Watch{received("cat", "v1", at(w0, 4), time.Minute)}))
	w.check(t, "cat's retry before batch 2's redelivery", map[string][2]int64{"v1": {2, 2}})
	w.mustDeliver(t, b2)
	w.check(t, "batch 2 redelivered", map[string][2]int64{"v1": {3, 3}})

	// Batch 3: dan watches v2 in two windows, two views; it commits, then
	// its instance dies before the ack.
	b3 := history.NewBatch([]history.Watch{received("dan", "v2", at(w0, 5), 0), received("dan", "v2", at(w1, 6), 0)})
	w.sink.n, w.sink.after = 1, true
	if got := w.deliver(t, b3); got != pushtest.Retried {
		t.Fatalf("the crash after the commit: %v, want redelivered", got)
	}
	w.sink.after = false
	w.mustDeliver(t, b3)
	w.check(t, "batch 3 committed, then redelivered", map[string][2]int64{"v2": {3, 2}})

	// Backdated watches are history, never views: dated more than a window
	// before their receipt, as far back as 1970.
	w.mustDeliver(t, history.NewBatch([]history.Watch{
		received("fay", "v3", at(w1, 1), w.window+time.Millisecond),
		received("fay", "v3", at(w1, 2), at(w1, 2).Sub(time.UnixMilli(1)))}))
	w.check(t, "backdated watches", map[string][2]int64{"v3": {0, 0}})
	// Dated exactly a window before its receipt: a view.
	w.mustDeliver(t, history.NewBatch([]history.Watch{received("fay", "v3", at(w1, 3), w.window)}))
	w.check(t, "a watch dated a window before its receipt", map[string][2]int64{"v3": {1, 1}})

	// A batch naming more videos than one event holds.
	var many []history.Watch
	for i := range 40 {
		many = append(many, received(fmt.Sprintf("m%d", i), fmt.Sprintf("many-%02d", i%20), at(w1, 1), time.Duration(i)*time.Second))
	}
	big := history.NewBatch(many)
	w.mustDeliver(t, big)
	w.mustDeliver(t, big)
	w.check(t, "40 watches of 20 videos", map[string][2]int64{"many-00": {2, 2}, "many-19": {2, 2}})

	// The form published before batches: one watch, counted once.
	old, _ := received("eve", "v2", at(w1, 9), 0).Encode()
	for range 2 {
		if got := push(t, w.fn, "old", old); got != pushtest.Acked {
			t.Fatalf("a single-watch message: %v", got)
		}
	}
	w.check(t, "a single-watch message delivered twice", map[string][2]int64{"v2": {4, 3}})

	for _, bad := range []string{`not json`, `{"batchId":"x","watches":[]}`, `{"batchId":"","watches":[{}]}`} {
		if got := push(t, w.fn, "bad", []byte(bad)); got != pushtest.Refused {
			t.Errorf("poison %q: %v, want refused", bad, got)
		}
	}
}

// Farmed views: one account posting watch after watch of one video, with
// new and backdated watch times (1970 to 5 minutes ahead), client retries
// and Pub/Sub redeliveries, is counted one view per viewing window, and no
// more: its watches received in two half-windows a window apart, the
// second's dated within the window, are two views, in any order.
func TestFarmedViewsCountOncePerWindow(t *testing.T) {
	w := newViewsWorld(t, 0)
	w0, w1 := windows(w.window)
	w2 := w1.Add(w.window)
	rng := rand.New(rand.NewPCG(27, 1))
	farm := func(start time.Time, n int, backdatedOnly bool) []history.Watch {
		var ws []history.Watch
		for range n {
			recv := start.Add(time.Duration(rng.Int64N(int64(w.window / 2))))
			var dated time.Duration
			switch {
			case backdatedOnly || rng.IntN(2) == 0: // before the window, as far back as 1970
				dated = w.window + time.Millisecond + time.Duration(rng.Int64N(int64(recv.Sub(time.UnixMilli(1))-w.window-time.Millisecond)))
			case rng.IntN(4) == 0: // ahead of the clock, within 5 minutes
				dated = -time.Duration(rng.Int64N(int64(history.MaxFuture)))
			default: // within the window
				dated = time.Duration(rng.Int64N(int64(w.window)))
			}
			ws = append(ws, received("farmer", "farmed", recv, dated))
		}
		return ws
	}
	// The first halves of windows 0 and 1: watches of every kind; the
	// second half of window 1 and window 2: backdated ones only.
	var all []history.Watch
	all = append(all, farm(w0, 300, false)...)
	all = append(all, farm(w1.Add(w.window/2), 300, false)...)
	all = append(all, farm(w2.Add(-w.window/2), 300, true)...)
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for len(all) > 0 {
		n := min(len(all), 1+rng.IntN(60))
		b := history.NewBatch(all[:n])
		w.mustDeliver(t, b)
		if rng.IntN(3) == 0 {
			w.mustDeliver(t, b) // Pub/Sub redelivers
		}
		if rng.IntN(3) == 0 { // a client retries one watch, in a batch of its own
			w.mustDeliver(t, history.NewBatch(all[:1]))
		}
		all = all[n:]
	}
	w.check(t, "900 farmed watches over three windows", map[string][2]int64{"farmed": {2, 1}})
}

// An account counted more views in a clock hour than a person can watch is
// flagged automatically, with its hour and views as evidence; an account
// under the limit, and one whose views were replays of one video, are not.
func TestViewVelocityFlagsAccounts(t *testing.T) {
	const limit = 50
	w := newViewsWorld(t, limit)
	ctx := context.Background()
	recv := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	var bot, human, replays []history.Watch
	for i := range limit + 1 {
		bot = append(bot, received("bot", fmt.Sprintf("farm-%d", i), recv, 0))
		replays = append(replays, received("replayer", "one", recv, time.Duration(i)*time.Second))
	}
	for i := range limit {
		human = append(human, received("human", fmt.Sprintf("watch-%d", i), recv, 0))
	}
	// In batches, each delivered twice: a redelivery counts no view again.
	for _, ws := range [][]history.Watch{bot, human, replays} {
		for len(ws) > 0 {
			n := min(len(ws), 7)
			b := history.NewBatch(ws[:n])
			w.mustDeliver(t, b)
			w.mustDeliver(t, b)
			ws = ws[n:]
		}
	}
	flags, _, err := w.flags.ListFlagged(ctx, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) != 1 || flags[0].UserID != "bot" || flags[0].Reason != moderation.Automatic || flags[0].Evidence == nil {
		t.Fatalf("flags %+v, want the bot alone, automatically, with evidence", flags)
	}
	ev := flags[0].Evidence
	hour := recv.Truncate(time.Hour)
	if ev.Views != limit+1 || ev.GroupSize != 1 || !ev.WindowStart.Equal(hour) || !ev.WindowEnd.Equal(hour.Add(time.Hour)) {
		t.Errorf("evidence %+v, want %d views in the hour from %v", ev, limit+1, hour)
	}
	// The batch that crossed the limit (the bot's 8th: views 50 and 51)
	// counted none of its views, and the flagged bot's later watches count
	// none either; the human's views all count.
	w.mustDeliver(t, history.NewBatch([]history.Watch{received("bot", "farm-0", recv.Add(w.window), 0), received("bot", "later", recv, 0)}))
	w.check(t, "the bot flagged by its velocity", map[string][2]int64{
		"farm-0": {1, 1}, "farm-48": {1, 1}, "farm-49": {0, 0}, "farm-50": {0, 0}, "later": {0, 0}, "watch-49": {1, 1}})
}

// Accounts flagged (by a moderator or the detection) and young accounts
// count no views: their watches are history only and claim nothing, so a
// flagged account's watch counts once its flag is lifted. The young rule
// fails closed: while the account records do not answer, the batch is
// redelivered, counting nothing, and counts once they answer.
func TestFlaggedAndYoungAccountsCountNoViews(t *testing.T) {
	now := time.Now().UTC()
	created := map[string]time.Time{"newbie": now.Add(-time.Hour), "elder": now.Add(-48 * time.Hour)}
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(rw, "unavailable", http.StatusServiceUnavailable)
			return
		}
		var body struct {
			LocalID []string `json:"localId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		users := []map[string]string{}
		for _, id := range body.LocalID {
			if c, ok := created[id]; ok {
				users = append(users, map[string]string{"localId": id, "createdAt": fmt.Sprint(c.UnixMilli())})
			}
		}
		_ = json.NewEncoder(rw).Encode(map[string]any{"users": users})
	}))
	t.Cleanup(srv.Close)
	young := auth.NewYoungAccounts(auth.NewAccountCreation(auth.NewAccountRecordsWith(srv.Client(), srv.URL, "p"), 100), 24*time.Hour)
	w := newViewsWorldOf(t, 0, young)
	ctx := context.Background()
	if _, err := w.flags.FlagAccounts(ctx, []moderation.Group{{Members: []string{"flagged"}, Evidence: moderation.Evidence{GroupSize: 1}}}); err != nil {
		t.Fatal(err)
	}
	recv := now.Add(-time.Minute).Truncate(time.Millisecond)
	b := history.NewBatch([]history.Watch{
		received("flagged", "fy", recv, 0), received("newbie", "fy", recv, 0),
		received("elder", "fy", recv, 0), received("unrecorded", "fy", recv, 0)})
	w.mustDeliver(t, b)
	w.mustDeliver(t, b)
	w.check(t, "a flagged, a young and two established accounts", map[string][2]int64{"fy": {2, 2}})

	// Unflagged, the account's next watch counts: its flagged watch
	// claimed nothing.
	if _, err := w.flags.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"flagged"}, Flagged: false, Reason: "reviewed"}); err != nil {
		t.Fatal(err)
	}
	w.mustDeliver(t, history.NewBatch([]history.Watch{received("flagged", "fy", recv.Add(time.Second), 0)}))
	w.check(t, "the unflagged account's next watch", map[string][2]int64{"fy": {3, 3}})

	// The records down: an account not seen yet cannot be judged, and its
	// batch counts nothing until they answer.
	created["late"] = now.Add(-72 * time.Hour)
	down.Store(true)
	late := history.NewBatch([]history.Watch{received("late", "fl", recv, 0)})
	if got := w.deliver(t, late); got != pushtest.Retried {
		t.Fatalf("a batch while the account records are down: %v, want redelivered", got)
	}
	w.check(t, "the records down", map[string][2]int64{"fl": {0, 0}})
	down.Store(false)
	w.mustDeliver(t, late)
	w.check(t, "the records back", map[string][2]int64{"fl": {1, 1}})
}

// Deliveries served at once on one instance count as one at a time: every
// batch pushed several times concurrently, and the batches sharing watches
// (a client's retries in other batches), leave each watch counted once.
func TestConcurrentDeliveriesCountOnce(t *testing.T) {
	w := newViewsWorld(t, 0)
	_, w1 := windows(w.window)
	// 8 users watch "hot" once each; batch i carries users i and
	// i+1, so every watch but the first and last is in two batches.
	var batches []history.Batch
	for i := range 8 {
		ws := []history.Watch{received(fmt.Sprintf("u%d", i), "hot", w1.Add(time.Minute), 0)}
		if i+1 < 8 {
			ws = append(ws, received(fmt.Sprintf("u%d", i+1), "hot", w1.Add(time.Minute), 0))
		}
		batches = append(batches, history.NewBatch(ws))
	}
	var wg sync.WaitGroup
	outcomes := make(chan pushtest.Outcome, len(batches)*3)
	for _, b := range batches {
		for range 3 {
			wg.Go(func() { outcomes <- w.deliver(t, b) })
		}
	}
	wg.Wait()
	close(outcomes)
	for got := range outcomes {
		if got != pushtest.Acked {
			t.Fatalf("a concurrent delivery: %v", got)
		}
	}
	w.check(t, "24 concurrent deliveries of 8 watches", map[string][2]int64{"hot": {8, 8}})
}

// ViewEvents are the same on every delivery and valid counter events.
func TestViewEventsDeterministic(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ws []history.Watch
	for i := range 50 {
		ws = append(ws, history.NewWatch(fmt.Sprintf("u%d", i%9), fmt.Sprintf("v%02d", i%18), at.Add(time.Duration(i)*time.Second), 0))
	}
	a := applyviewsfn.ViewEvents(history.NewViewerHasher("test"), "b", ws)
	rev := append([]history.Watch(nil), ws...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	b := applyviewsfn.ViewEvents(history.NewViewerHasher("test"), "b", rev)
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
