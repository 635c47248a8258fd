package reactionstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) {
	flag.Parse()
	emulatortest.Main(m)
}

type world struct {
	cfg    *config.Config
	db     *spannerdb.DB
	rs     *reactionstore.Store
	mod    *moderationstore.Store
	outbox *outboxstore.Store
	counts *countstore.Store
	folds  *foldstore.Store
	recon  *reconcilestore.Store
	pub    *pushtest.Events
	writer *reactionstore.Writer
}

type worldOpts struct {
	policy  counter.ShardPolicy
	batched bool
}

func newWorld(t *testing.T, o worldOpts) *world {
	t.Helper()
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	w := &world{cfg: cfg, db: db, pub: &pushtest.Events{}}
	w.rs = reactionstore.New(db)
	w.mod = moderationstore.New(db, moderationstore.Gate{})
	w.outbox, w.counts, w.recon = outboxstore.New(db), countstore.New(db), reconcilestore.New(db, reconcilestore.Options{})
	w.folds = foldstore.New(db, foldstore.Options{Policy: o.policy, RollupInterval: time.Second})
	w.writer = reactionstore.NewWriter(w.rs, w.pub, reactionstore.WriterOptions{Batched: o.batched, MaxInFlight: 1})
	return w
}

func (w *world) set(t *testing.T, user, content string, to reaction.Kind) reactionstore.SetResult {
	t.Helper()
	res, err := w.writer.Set(context.Background(), reactionstore.SetRequest{UserID: user, ContentID: content, To: to})
	if err != nil {
		t.Fatalf("set %s %s %s: %v", user, content, to, err)
	}
	if res.Err != nil {
		t.Fatalf("set %s %s %s: %v", user, content, to, res.Err)
	}
	return res
}

// deliver applies messages as the consumer would.
func (w *world) deliver(t *testing.T, msgs [][]events.Event) counter.ApplyStats {
	t.Helper()
	var total counter.ApplyStats
	for _, m := range msgs {
		st, err := w.outbox.Apply(context.Background(), m)
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		total.Applied += st.Applied
		total.Duplicates += st.Duplicates
	}
	return total
}

func (w *world) counted(t *testing.T, id string) counter.Values {
	t.Helper()
	c, _, err := w.counts.Totals(context.Background(), []string{id})
	if err != nil {
		t.Fatal(err)
	}
	return c[id]
}

func (w *world) pending(t *testing.T, id string) counter.Values {
	t.Helper()
	_, p, err := w.counts.Totals(context.Background(), []string{id})
	if err != nil {
		t.Fatal(err)
	}
	return p[id]
}

func (w *world) anonymous(t *testing.T, id string) counter.Values {
	t.Helper()
	c, err := w.counts.Counts(context.Background(), []string{id}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c.Values[id]
}

func (w *world) fold(t *testing.T) foldstore.Stats {
	t.Helper()
	st, err := w.folds.Fold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// reconcile runs a reconciliation as the Reconcile function does; an hourly
// one after a fold (the rollup's, which marks the counters that moved) and
// with the flag changes applied to the tallies first.
func (w *world) reconcile(t *testing.T, scope reconcilestore.Scope) reconcilestore.Report {
	t.Helper()
	ctx := context.Background()
	if scope == reconcilestore.Recent {
		if _, err := w.folds.Fold(ctx); err != nil {
			t.Fatal(err)
		}
		if rep, err := w.rs.ApplyFlags(ctx, time.Time{}); err != nil || !rep.Done {
			t.Fatal(rep, err)
		}
	}
	rep, err := w.recon.Reconcile(ctx, scope, []reconcilestore.Source{reactionstore.Source{}})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func likes(l, d int64) counter.Values { return counter.Values{Likes: l, Dislikes: d} }

func TestEveryTransitionCountsOnce(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	kinds := []reaction.Kind{reaction.None, reaction.Like, reaction.Dislike}
	// Every ordered pair (from, to), each on its own item.
	for _, from := range kinds {
		for _, to := range kinds {
			item := fmt.Sprintf("item-%s-%s", from, to)
			if from != reaction.None {
				w.set(t, "u", item, from)
			}
			before := w.set(t, "u", item, from)
			res := w.set(t, "u", item, to)
			w.deliver(t, w.pub.Take())
			want := counter.Values{}
			switch to {
			case reaction.Like:
				want.Likes = 1
			case reaction.Dislike:
				want.Dislikes = 1
			}
			if got := w.counted(t, item); got != want {
				t.Errorf("%s→%s: counted %+v, want %+v", from, to, got, want)
			}
			if got := w.pending(t, item); !got.IsZero() {
				t.Errorf("%s→%s: %+v still pending after delivery", from, to, got)
			}
			if from == to && res.State.Tag() != before.State.Tag() {
				t.Errorf("%s→%s: a no-op moved the version %d → %d", from, to, before.State.Tag(), res.State.Tag())
			}
			if res.State.Current() != to {
				t.Errorf("%s→%s: state %+v", from, to, res.State)
			}
			got, err := w.rs.Get(context.Background(), "u", []string{item})
			if err != nil {
				t.Fatal(err)
			}
			if got[item].Current() != to || got[item].Tag() != res.State.Tag() {
				t.Errorf("%s→%s: stored %+v, answered %+v", from, to, got[item], res.State)
			}
		}
	}
}

func TestIfMatch(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	r := w.set(t, "u", "v", reaction.Like)
	stale := r.State.Tag()
	cur := w.set(t, "u", "v", reaction.Dislike).State.Tag()
	res, err := w.writer.Set(ctx, reactionstore.SetRequest{UserID: "u", ContentID: "v", To: reaction.Like, IfMatch: &stale})
	var mm *reaction.ErrVersionMismatch
	if err != nil || !errors.As(res.Err, &mm) || mm.Current != cur || cur != stale+1 {
		t.Fatalf("stale If-Match: err %v, result %+v", err, res)
	}
	res, err = w.writer.Set(ctx, reactionstore.SetRequest{UserID: "u", ContentID: "v", To: reaction.Like, IfMatch: &cur})
	if err != nil || res.Err != nil || res.State.Version != 3 || res.State.Tag() != cur+1 {
		t.Fatalf("matching If-Match: %v %+v", err, res)
	}
	w.deliver(t, w.pub.Take())
	if got := w.counted(t, "v"); got != likes(1, 0) {
		t.Fatalf("counted %+v after a refused change", got)
	}
}

func TestDuplicateAndOutOfOrderDelivery(t *testing.T) {
	w := newWorld(t, worldOpts{batched: false})
	w.set(t, "a", "v", reaction.Like)
	w.set(t, "a", "v", reaction.None)
	w.set(t, "b", "v", reaction.Dislike)
	w.set(t, "c", "v", reaction.Like)
	msgs := w.pub.Take()
	// The undo took a's share out of the pending summed row of the like:
	// nothing of a's is left to send.
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want 3 (unbatched, the undo cancelling its pending like)", len(msgs))
	}
	// Everything, in reverse, twice.
	for i := 0; i < 2; i++ {
		for j := len(msgs) - 1; j >= 0; j-- {
			w.deliver(t, msgs[j:j+1])
		}
	}
	if got := w.counted(t, "v"); got != likes(1, 1) {
		t.Fatalf("after duplicates and reordering: counted %+v, want 1 like 1 dislike", got)
	}
	// A message that repeats an event inside itself counts it once too.
	st := w.deliver(t, [][]events.Event{append(msgs[2], msgs[2]...)})
	if st.Applied != 0 {
		t.Fatalf("replayed message applied %d events", st.Applied)
	}
}

// A counter that dips below zero (an undo counted before the change it
// undoes) is never shown negative.
func TestNegativeCountShownAsZero(t *testing.T) {
	w := newWorld(t, worldOpts{batched: false})
	undo := events.Event{ID: "undo-first", Kind: events.KindCounterDelta, Deltas: counter.Deltas("v", counter.Values{Likes: -1})}
	w.deliver(t, [][]events.Event{{undo}})
	if got := w.counted(t, "v"); got != likes(-1, 0) {
		t.Fatalf("after the undo alone: counted %+v", got)
	}
	if got := w.anonymous(t, "v"); got != likes(0, 0) {
		t.Fatalf("a negative count was shown: %+v", got)
	}
}

// A crash after the commit but before the acknowledgement means Pub/Sub
// delivers the same message again (possibly after a fold moved the shards):
// the second delivery changes nothing.
func TestConsumerCrashBetweenCommitAndAck(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	for i := 0; i < 5; i++ {
		w.set(t, fmt.Sprintf("u%d", i), "v", reaction.Like)
	}
	msgs := w.pub.Take()
	w.deliver(t, msgs) // committed; the ack is lost
	w.fold(t)
	st := w.deliver(t, msgs) // redelivered
	if st.Applied != 0 || st.Duplicates != 5 {
		t.Fatalf("redelivery applied %d, recognised %d duplicates", st.Applied, st.Duplicates)
	}
	if got := w.counted(t, "v"); got != likes(5, 0) {
		t.Fatalf("counted %+v, want 5 likes", got)
	}
	// Views from the history topic are idempotent through AppliedEvents.
	view := []events.Event{{ID: "watch-1", Kind: events.KindCounterDelta, Deltas: []counter.Delta{{Key: "v", Field: counter.Views, N: 1}}}}
	w.deliver(t, [][]events.Event{view})
	w.deliver(t, [][]events.Event{view})
	if got := w.counted(t, "v").Views; got != 1 {
		t.Fatalf("views %d after a duplicated watch", got)
	}
}

func TestConcurrentTogglesOnOneItem(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	const users = 40
	final := make([]reaction.Kind, users)
	var wg sync.WaitGroup
	var failed sync.Once
	for u := 0; u < users; u++ {
		wg.Add(1)
		go func(u int) {
			defer wg.Done()
			seq := []reaction.Kind{reaction.Like, reaction.Dislike, reaction.None, reaction.Like, reaction.Dislike}
			n := 1 + rand.IntN(len(seq))
			for _, k := range seq[:n] {
				res, err := w.writer.Set(context.Background(), reactionstore.SetRequest{UserID: fmt.Sprintf("u%d", u), ContentID: "hot", To: k})
				if err != nil || res.Err != nil {
					failed.Do(func() { t.Errorf("user %d: %v %v", u, err, res.Err) })
					return
				}
			}
			final[u] = seq[n-1]
		}(u)
	}
	// Deliver concurrently with the writers, in the order published.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			w.deliver(t, w.pub.Take())
			want := counter.Values{}
			for _, k := range final {
				switch k {
				case reaction.Like:
					want.Likes++
				case reaction.Dislike:
					want.Dislikes++
				}
			}
			w.fold(t)
			if got := w.counted(t, "hot"); got != want {
				t.Fatalf("counted %+v, want %+v", got, want)
			}
			if got := w.anonymous(t, "hot"); got != want {
				t.Fatalf("shown %+v, want %+v", got, want)
			}
			return
		default:
			w.deliver(t, w.pub.Take())
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// The author's next read includes the author's own change exactly once: when
// it is still pending, and when it is counted, never both.
func TestReadYourOwnWrites(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	w.set(t, "other", "v", reaction.Like)
	w.deliver(t, w.pub.Take())
	mine := w.set(t, "me", "v", reaction.Like)
	me := &countstore.Viewer{UserID: "me"}
	read := func() countstore.Counts {
		c, err := w.counts.Counts(ctx, []string{"v", "unknown"}, me, 0)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := read()
	if c.Values["v"] != likes(2, 0) {
		t.Fatalf("own pending like: %+v, want 2 likes", c.Values["v"])
	}
	if c.Reactions["v"].Reaction != "like" || c.Reactions["v"].Version != mine.State.Tag() {
		t.Fatalf("viewer reaction %+v", c.Reactions["v"])
	}
	if _, ok := c.Reactions["unknown"]; ok || c.Values["unknown"] != (counter.Values{}) {
		t.Fatalf("unknown id: %+v", c)
	}
	if got := w.anonymous(t, "v"); got != likes(1, 0) {
		t.Fatalf("others see %+v before the change is counted", got)
	}
	w.deliver(t, w.pub.Take())
	if got := read().Values["v"]; got != likes(2, 0) {
		t.Fatalf("own counted like: %+v, want 2 likes (not 3)", got)
	}
	w.fold(t)
	if got := read().Values["v"]; got != likes(2, 0) {
		t.Fatalf("after the fold: %+v", got)
	}
	// An undo not yet counted shows at once to its author.
	w.set(t, "me", "v", reaction.None)
	if got := read().Values["v"]; got != likes(1, 0) {
		t.Fatalf("own pending undo: %+v, want 1 like", got)
	}
}

// A publish that fails after the reaction was recorded is answered as done
// (the change stands, pending in the outbox, where the relay finds it); a
// client's retry changes nothing but sends the same event again.
func TestRetryRepublishesAfterLostPublish(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	w.pub.SetFail(errors.New("pubsub down"))
	res, err := w.writer.Set(ctx, reactionstore.SetRequest{UserID: "u", ContentID: "v", To: reaction.Like})
	if err != nil || res.Err != nil || res.State.Version != 1 {
		t.Fatalf("failed publish: err %v, result %+v", err, res)
	}
	if msgs := w.pub.Take(); len(msgs) != 0 {
		t.Fatalf("a failed publish delivered %v", msgs)
	}
	stale, err := w.outbox.Stale(ctx, -time.Minute)
	if err != nil || len(stale) != 1 || res.Event == nil || stale[0].ID != res.Event.ID {
		t.Fatalf("relay finds %+v (%v), want the recorded event %+v", stale, err, res.Event)
	}
	w.pub.SetFail(nil)
	retry := w.set(t, "u", "v", reaction.Like)
	if retry.State.Version != 1 {
		t.Fatalf("retry moved the version to %d", retry.State.Version)
	}
	msgs := w.pub.Take()
	// The original event: the summed row of its outbox batch.
	if len(msgs) != 1 || len(msgs[0]) != 1 || res.Event == nil || msgs[0][0].ID != res.Event.ID ||
		!strings.HasSuffix(res.Event.ID, "~s0") {
		t.Fatalf("retry published %+v, want the original event %+v", msgs, res.Event)
	}
	w.deliver(t, msgs)
	w.deliver(t, msgs)
	if got := w.counted(t, "v"); got != likes(1, 0) {
		t.Fatalf("counted %+v", got)
	}
	// The rollup's relay finds nothing left to republish.
	stale, err = w.outbox.Stale(ctx, 0)
	if err != nil || len(stale) != 0 {
		t.Fatalf("stale after delivery: %v %v", stale, err)
	}
}

func mustGen(t *testing.T, w *world, user, content string) int64 {
	t.Helper()
	got, err := w.rs.Get(context.Background(), user, []string{content})
	if err != nil {
		t.Fatal(err)
	}
	return got[content].Generation
}

func TestRelayRepublishesLostMessages(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	w.set(t, "u", "v", reaction.Like)
	w.set(t, "u2", "v", reaction.Dislike)
	w.pub.Take() // lost
	// Every pending row, however recent: the emulator's commit timestamps
	// can run a little ahead of this process's clock under load.
	stale, err := w.outbox.Stale(context.Background(), -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != 2 {
		t.Fatalf("relay found %d events, want 2", len(stale))
	}
	w.deliver(t, [][]events.Event{stale})
	if got := w.counted(t, "v"); got != likes(1, 1) {
		t.Fatalf("counted %+v after the relay", got)
	}
}

func TestReconciliation(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		w.set(t, fmt.Sprintf("u%d", i), "v", reaction.Like)
	}
	w.set(t, "d", "v", reaction.Dislike)
	w.deliver(t, w.pub.Take())
	w.fold(t)

	// Right counts stay right while events are in flight: three changes
	// recorded but not delivered.
	w.set(t, "u0", "v", reaction.None)
	w.set(t, "n1", "v", reaction.Like)
	w.set(t, "n2", "v", reaction.Dislike)
	inFlight := w.pub.Take()
	if rep := w.reconcile(t, reconcilestore.All); rep.Corrected != 0 {
		t.Fatalf("reconciliation corrected a right count with events in flight: %+v", rep)
	}
	w.deliver(t, inFlight)
	if got := w.counted(t, "v"); got != likes(6, 2) {
		t.Fatalf("after in-flight delivery: %+v, want 6 likes 2 dislikes", got)
	}

	// A lost event: a change whose outbox row vanished uncounted.
	w.set(t, "lost", "v", reaction.Like)
	w.pub.Take()
	if _, err := w.db.Client.Apply(ctx, []*spanner.Mutation{spanner.Delete("PendingDeltas", spanner.AllKeys())}); err != nil {
		t.Fatal(err)
	}
	// A duplicated delta: one dislike too many on a shard.
	if _, err := w.db.Client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("CounterShards",
		[]string{"CounterKey", "Shard", "Dislikes", "Likes", "Comments", "Replies", "Views", "Writes"},
		[]any{"v", int64(9), int64(1), int64(0), int64(0), int64(0), int64(0), int64(1)})}); err != nil {
		t.Fatal(err)
	}
	if got := w.counted(t, "v"); got != likes(6, 3) {
		t.Fatalf("drift not injected: %+v", got)
	}
	rep := w.reconcile(t, reconcilestore.Recent)
	if rep.Corrected != 1 || len(rep.Corrections) != 1 || rep.Corrections[0].Delta != likes(1, -1) {
		t.Fatalf("report %+v, want one correction of +1 like −1 dislike", rep)
	}
	if got := w.counted(t, "v"); got != likes(7, 2) {
		t.Fatalf("after reconciliation: %+v, want 7 likes 2 dislikes", got)
	}
	if rep := w.reconcile(t, reconcilestore.All); rep.Corrected != 0 {
		t.Fatalf("second run corrected again: %+v", rep)
	}
}

func TestFlaggedUsersExcludedAndCountedAgain(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	for _, u := range []string{"bot1", "bot2", "human"} {
		w.set(t, u, "v", reaction.Like)
	}
	w.set(t, "bot1", "w", reaction.Dislike)
	w.deliver(t, w.pub.Take())
	n, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"bot1", "bot2", "bot2"}, Flagged: true})
	if err != nil || n != 2 {
		t.Fatalf("flag: %d %v", n, err)
	}
	if n, _ := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"bot1"}, Flagged: true}); n != 0 {
		t.Fatalf("flagging again updated %d", n)
	}
	// Counts are unchanged until the next reconciliation.
	if got := w.counted(t, "v"); got != likes(3, 0) {
		t.Fatalf("before reconciliation: %+v", got)
	}
	rep := w.reconcile(t, reconcilestore.Recent)
	if rep.Corrected != 2 {
		t.Fatalf("report %+v, want v and w corrected", rep)
	}
	if got := w.counted(t, "v"); got != likes(1, 0) {
		t.Fatalf("after flagging: %+v, want 1 like", got)
	}
	if got := w.counted(t, "w"); got != likes(0, 0) {
		t.Fatalf("w after flagging: %+v", got)
	}
	// A flagged account's changes are recorded, seen by itself, not counted.
	w.set(t, "bot2", "v", reaction.Dislike)
	if msgs := w.pub.Take(); len(msgs) != 0 {
		t.Fatalf("a flagged account's change was published: %+v", msgs)
	}
	got, _ := w.rs.Get(ctx, "bot2", []string{"v"})
	if got["v"].Current() != reaction.Dislike {
		t.Fatalf("flagged account's own reaction: %+v", got["v"])
	}
	if rep := w.reconcile(t, reconcilestore.All); rep.Corrected != 0 {
		t.Fatalf("flagged change corrected: %+v", rep)
	}
	// Unflagged: counted again by the next reconciliation.
	if n, _ := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"bot1", "bot2"}, Flagged: false}); n != 2 {
		t.Fatalf("unflag updated %d", n)
	}
	w.reconcile(t, reconcilestore.Recent)
	if got := w.counted(t, "v"); got != likes(2, 1) {
		t.Fatalf("after unflagging: %+v, want 2 likes 1 dislike", got)
	}
	if got := w.counted(t, "w"); got != likes(0, 1) {
		t.Fatalf("w after unflagging: %+v", got)
	}
}

func TestShardCountRisesUnderLoadAndFallsBack(t *testing.T) {
	// One commit per second per shard: a handful of batches a second is
	// "hot" for this test.
	w := newWorld(t, worldOpts{batched: false, policy: counter.ShardPolicy{WritesPerShard: 1, MinWindow: time.Second}})
	ctx := context.Background()
	shards := func() int {
		n, err := w.folds.ShardCount(ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// 100 deliveries (each its own commit) within about a second.
	for i := 0; i < 100; i++ {
		w.set(t, fmt.Sprintf("u%d", i), "hot", reaction.Like)
	}
	w.deliver(t, w.pub.Take())
	st := w.fold(t)
	if got := shards(); got < 32 {
		t.Fatalf("after 100 commits in about a second: %d shards (fold %+v), want at least 32", got, st)
	}
	if got := w.counted(t, "hot"); got != likes(100, 0) {
		t.Fatalf("counted %+v", got)
	}
	// Writes spread over the shards.
	for i := 100; i < 160; i++ {
		w.set(t, fmt.Sprintf("u%d", i), "hot", reaction.Like)
	}
	w.deliver(t, w.pub.Take())
	var used int64
	if err := w.db.Single().Query(ctx, spanner.Statement{SQL: `SELECT COUNT(*) FROM CounterShards WHERE CounterKey = "hot"`}).Do(func(r *spanner.Row) error {
		return r.Columns(&used)
	}); err != nil {
		t.Fatal(err)
	}
	if used < 10 {
		t.Fatalf("60 commits touched %d shard rows, want them spread", used)
	}
	// Quiet: each fold halves the count down to the minimum.
	for i := 0; i < 8 && shards() > counter.MinShards; i++ {
		time.Sleep(1100 * time.Millisecond)
		w.fold(t)
	}
	if got := shards(); got != counter.MinShards {
		t.Fatalf("after the load stopped: %d shards, want %d", got, counter.MinShards)
	}
	if got := w.anonymous(t, "hot"); got != likes(160, 0) {
		t.Fatalf("shown %+v, want 160 likes", got)
	}
	// Nothing left to visit once the count is back at the minimum.
	if st := w.fold(t); st.Counters != 0 {
		t.Fatalf("idle fold visited %d counters", st.Counters)
	}
}

// TestSourceKeysAfter pages through the items the reactions' source lists
// for reconciliation: every item with a reaction, in order, none twice.
func TestSourceKeysAfter(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	want := []string{"i1", "i2", "i3", "i4", "i5"}
	for i, item := range []string{"i4", "i2", "i5", "i1", "i3"} {
		w.set(t, "u1", item, reaction.Like)
		if i%2 == 0 {
			w.set(t, "u2", item, reaction.Dislike)
		}
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatalf("no end after %d pages: %v", pages, got)
		}
		var keys []string
		err := w.db.InSnapshot(context.Background(), func(ctx context.Context, tx *spanner.ReadOnlyTransaction) (err error) {
			keys, err = reactionstore.Source{}.KeysAfter(ctx, tx, after, 2)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, keys...)
		if len(keys) < 2 {
			break
		}
		after = keys[len(keys)-1]
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("keys %v, want %v", got, want)
	}
}

// fakeLimiter admits up to n actions per user and records each call.
type fakeLimiter struct {
	mu    sync.Mutex
	n     int
	seen  map[string]int
	calls [][]string
	err   error
}

func (l *fakeLimiter) AllowMany(_ context.Context, users []string) ([]time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, users)
	if l.err != nil {
		return nil, l.err
	}
	waits := make([]time.Duration, len(users))
	for i, u := range users {
		l.seen[u]++
		if l.seen[u] > l.n {
			waits[i] = 30 * time.Second
		}
	}
	return waits, nil
}

// TestWriterLimiter: the requests of one transaction are checked in one
// limiter call before it; refused ones answer RateLimitedError and write
// nothing while the others of their group are recorded; a failed check
// fails its group, with nothing written.
func TestWriterLimiter(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	lim := &fakeLimiter{n: 1, seen: map[string]int{}}
	w.writer.LimitWith(lim)
	ctx := context.Background()
	w.set(t, "u", "a", reaction.Like) // u's one admitted action
	var wg sync.WaitGroup
	results := make([]reactionstore.SetResult, 16)
	failed := make([]error, 16)
	for i := range results {
		wg.Go(func() {
			user := fmt.Sprintf("user-%d", i)
			if i%4 == 0 {
				user = "u"
			}
			results[i], failed[i] = w.writer.Set(ctx, reactionstore.SetRequest{UserID: user, ContentID: "hot", To: reaction.Like})
		})
	}
	wg.Wait()
	var limited *errs.RateLimitedError
	for i, res := range results {
		switch {
		case failed[i] != nil:
			t.Errorf("request %d: %v", i, failed[i])
		case i%4 == 0 && (!errors.As(res.Err, &limited) || limited.RetryAfter != 30*time.Second):
			t.Errorf("request %d of a user over the limit: %+v", i, res)
		case i%4 != 0 && (res.Err != nil || res.State.Current() != reaction.Like):
			t.Errorf("request %d of a user under the limit: %+v", i, res)
		}
	}
	lim.mu.Lock()
	checked := 0
	for _, c := range lim.calls {
		checked += len(c)
	}
	calls := len(lim.calls)
	lim.mu.Unlock()
	if checked != 17 || calls > 17 {
		t.Errorf("%d actions checked in %d calls, want 17 in at most 17", checked, calls)
	}
	got, err := w.rs.Get(ctx, "u", []string{"hot"})
	if err != nil {
		t.Fatal(err)
	}
	if got["hot"].Current() != reaction.None {
		t.Errorf("a refused change was recorded: %+v", got["hot"])
	}
	// The limiter down: the request fails as the backend's, nothing written.
	lim.mu.Lock()
	lim.err = errLimiterDown
	lim.mu.Unlock()
	if _, err := w.writer.Set(ctx, reactionstore.SetRequest{UserID: "new", ContentID: "hot", To: reaction.Like}); !errors.Is(err, errLimiterDown) {
		t.Errorf("limiter down: %v, want its error", err)
	}
	if got, _ := w.rs.Get(ctx, "new", []string{"hot"}); got["hot"].Current() != reaction.None {
		t.Errorf("recorded without a limit check: %+v", got["hot"])
	}
}

var errLimiterDown = errors.New("limiter backend down")

// The changes of one transaction on one item write one summed outbox row,
// each user's share kept on their reaction row: every read of a user's own
// counts (the counts query, the by-key read) adds exactly their pending
// shares, an undo takes its shares out of the summed rows before they are
// counted, a retry republishes them, and every count ends exact.
func TestSummedOutboxSharesCountOnce(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	setMany := func(reqs ...reactionstore.SetRequest) []events.Event {
		t.Helper()
		res, err := w.rs.SetMany(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		return reactionstore.Events(res)
	}
	req := func(user, item string, to reaction.Kind) reactionstore.SetRequest {
		return reactionstore.SetRequest{UserID: user, ContentID: item, To: to}
	}
	// sees checks the user's own counts of v by every read path.
	sees := func(user string, want counter.Values) {
		t.Helper()
		ids := []string{"v"}
		c, err := w.counts.Counts(ctx, ids, &countstore.Viewer{UserID: user}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Values["v"]; got != want {
			t.Errorf("%s sees %+v in one query, want %+v", user, got, want)
		}
		own, err := w.counts.Own(ctx, countstore.OwnQuery{Viewer: user, IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		if got := own.Merge(ids, nil)["v"]; got != want {
			t.Errorf("%s sees %+v by key, want %+v", user, got, want)
		}
	}
	before := otelcount.Global().Spanner().WritesByTable
	first := setMany(req("a", "v", reaction.Like), req("b", "v", reaction.Like), req("c", "v", reaction.Dislike), req("a", "w", reaction.Like))
	after := otelcount.Global().Spanner().WritesByTable
	if n := after["PendingDeltas"] - before["PendingDeltas"]; n != 2 {
		t.Errorf("%d outbox rows for 4 changes on 2 items, want 2 (one summed row an item)", n)
	}
	if n := after["Reactions"] - before["Reactions"]; n != 4 {
		t.Errorf("%d reaction rows written, want 4", n)
	}
	if len(first) != 2 {
		t.Fatalf("%d events, want one summed event an item: %+v", len(first), first)
	}
	sees("a", likes(1, 0))
	sees("b", likes(1, 0))
	sees("c", likes(0, 1))
	sees("nobody", likes(0, 0))

	// a's undo before the like is counted: a's share leaves the summed row.
	if evs := setMany(req("a", "v", reaction.None)); len(evs) != 0 {
		t.Errorf("an undo of a pending like published %+v, want nothing (they cancel)", evs)
	}
	sees("a", likes(0, 0))
	sees("b", likes(1, 0))
	// b changes its mind in a second transaction: two shares pending.
	second := setMany(req("b", "v", reaction.Dislike))
	sees("b", likes(0, 1))
	if rep := w.reconcile(t, reconcilestore.All); rep.Corrected != 0 {
		t.Fatalf("reconciliation corrected right counts with shares pending: %+v", rep)
	}

	w.deliver(t, [][]events.Event{first})
	if got := w.counted(t, "v"); got != likes(1, 1) {
		t.Fatalf("after the first transaction: counted %+v, want 1 like (b) 1 dislike (c)", got)
	}
	sees("b", likes(0, 2))
	sees("c", likes(1, 1)) // nothing of c's pending

	// b's retry republishes b's pending summed row, not the counted one.
	retry := setMany(req("b", "v", reaction.Dislike))
	if len(retry) != 1 || len(second) != 1 || retry[0].ID != second[0].ID {
		t.Fatalf("retry republished %+v, want the pending %+v", retry, second)
	}
	w.deliver(t, [][]events.Event{retry, second, first})
	if got := w.counted(t, "v"); got != likes(0, 2) {
		t.Fatalf("counted %+v, want 2 dislikes", got)
	}
	if got := w.counted(t, "w"); got != likes(1, 0) {
		t.Fatalf("w counted %+v, want 1 like", got)
	}
	sees("b", likes(0, 2))
	// b's undo now: its shares are counted, so the undo is its own row.
	w.deliver(t, [][]events.Event{setMany(req("b", "v", reaction.None))})
	sees("b", likes(0, 1))
	if got := w.counted(t, "v"); got != likes(0, 1) {
		t.Fatalf("counted %+v, want 1 dislike", got)
	}
	if rep := w.reconcile(t, reconcilestore.All); rep.Corrected != 0 {
		t.Fatalf("reconciliation corrected %+v", rep)
	}
	if stale, err := w.outbox.Stale(ctx, -time.Minute); err != nil || len(stale) != 0 {
		t.Fatalf("outbox left %+v %v", stale, err)
	}
}

// A reaction row holds a bounded number of shares: a user changing their
// mind many times while nothing is counted goes on in rows of their own,
// and every read of theirs stays exact.
func TestManyPendingSharesOnOneRow(t *testing.T) {
	w := newWorld(t, worldOpts{batched: true})
	ctx := context.Background()
	kinds := []reaction.Kind{reaction.Like, reaction.Dislike}
	const changes = 20
	for i := range changes {
		w.set(t, "u", "v", kinds[i%2])
	}
	last := kinds[(changes-1)%2]
	want := likes(0, 1)
	if last == reaction.Like {
		want = likes(1, 0)
	}
	sees := func(when string) {
		t.Helper()
		own, err := w.counts.Own(ctx, countstore.OwnQuery{Viewer: "u", IDs: []string{"v"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := own.Merge([]string{"v"}, nil)["v"]; got != want {
			t.Fatalf("%s: u sees %+v, want %+v", when, got, want)
		}
	}
	sees("all pending")
	var rows int64
	if err := w.db.Client.Single().Query(ctx, spanner.Statement{SQL: `SELECT COUNT(*) FROM PendingDeltas WHERE UserId = 'u'`}).Do(func(r *spanner.Row) error {
		return r.Columns(&rows)
	}); err != nil {
		t.Fatal(err)
	}
	if rows != changes-16 {
		t.Errorf("%d outbox rows of u's own, want %d (the changes past 16 pending shares)", rows, changes-16)
	}
	w.deliver(t, w.pub.Take())
	sees("all counted")
	if got := w.counted(t, "v"); got != want {
		t.Fatalf("counted %+v, want %+v", got, want)
	}
	// The next change prunes the counted shares and is a share again.
	w.set(t, "u", "v", reaction.Like)
	want = likes(1, 0)
	sees("one pending again")
	w.deliver(t, w.pub.Take())
	if got := w.counted(t, "v"); got != want {
		t.Fatalf("counted %+v, want %+v", got, want)
	}
}
