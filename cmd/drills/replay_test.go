package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/cmd/internal/replay"
	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/shared/topology"
)

// Drill 7. The watch consumers refuse history batches (a bad release) until
// Pub/Sub dead-letters them after the configured delivery attempts: some
// only by ApplyHistory, some only by ApplyViews, some by both; and
// ApplyCounters refuses every other reaction message of the load the same
// way. History and views are short. After the fix, a dry run of cmd/replay
// lists them and leaves them; the replay republishes every dead letter to
// its topic, so that each consumer also receives copies of messages it had
// applied, and batches dead-lettered twice arrive twice; the reactions'
// events also reach ApplyCounters again through the rollup's relay (their
// outbox rows wait meanwhile), so their replayed copies arrive beside
// copies already counted. Counters (reactions, views, unique viewers) and
// history end exact (settle), with no reconciliation: nothing but the
// replay repairs views and history, and nothing needs to.
func TestDrillDeadLetteredWatchesReplayed(t *testing.T) {
	st := startStack(t, stackOptions{})
	top := topology.MustLoad()
	attempts := top.PubSub.Delivery.MaxDeliveryAttempts

	// refuses says which subscriptions a broken release refuses a message
	// on, by the order the messages first arrive in: ApplyHistory only,
	// ApplyViews only, both, in turn. A message has one id on every
	// subscription. Called with mu held.
	kinds := map[string]int{}
	refuses := func(id string) (apply, views bool) {
		k, ok := kinds[id]
		if !ok {
			k = len(kinds) % 3
			kinds[id] = k
		}
		return k != 1, k != 0
	}
	var mu sync.Mutex
	broken := true
	loading := true                  // the reaction messages of the load, not the relay's later copies
	counterMsgs := map[string]bool{} // counter message id → refused
	refused := map[string]int{}      // subscription|message id → refusals
	applied := map[string]int{}      // subscription|batch → deliveries applied
	st.proxy.setFault(func(d delivery) (int, bool) {
		switch d.sub {
		case "counter-apply":
			mu.Lock()
			refuse, seen := counterMsgs[d.id]
			if !seen && loading {
				refuse = len(counterMsgs)%2 == 0
				counterMsgs[d.id] = refuse
			}
			if broken && refuse {
				refused[d.key()]++
				mu.Unlock()
				return http.StatusServiceUnavailable, true
			}
			mu.Unlock()
			return 0, false
		case "history-apply", "history-views":
		default:
			return 0, false
		}
		mu.Lock()
		apply, views := refuses(d.id)
		if broken && (d.sub == "history-apply" && apply || d.sub == "history-views" && views) {
			refused[d.key()]++
			mu.Unlock()
			return http.StatusServiceUnavailable, true
		}
		mu.Unlock()
		code := st.proxy.forward(context.Background(), d)
		if code < 300 {
			mu.Lock()
			applied[d.sub+"|"+string(d.data)]++
			mu.Unlock()
		}
		return code, true
	})

	// Reactions beside, and watches of our own: each viewer watches each
	// video once, now (one view each, whatever the viewing window), the
	// viewers of a video at once, so that batches carry several watches.
	l := startLoad(st, workload.Spec{Reactors: 2, Keys: keys(4), Pace: 100 * time.Millisecond})
	viewers := map[string]string{} // user → token
	for i := range 6 {
		u := fmt.Sprintf("viewer-%d", i)
		viewers[u] = st.token(u)
		l.Model.AddUser(u, viewers[u])
	}
	for _, video := range keys(4) {
		var wg sync.WaitGroup
		for u, tok := range viewers {
			wg.Go(func() {
				if err := l.RecordWatch(u, tok, video, time.Now().UTC().Truncate(time.Millisecond)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	finish(t, l)
	mu.Lock()
	loading = false
	mu.Unlock()

	// Every refused delivery is retried until it is dead-lettered.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		deliveries := st.proxy.deliveriesOf()
		mu.Lock()
		waiting := 0
		for k := range refused {
			if deliveries[k] < attempts {
				waiting++
			}
		}
		n := len(refused)
		mu.Unlock()
		if n > 0 && waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d refused messages not yet delivered %d times after 2 min", waiting, n, attempts)
		}
		time.Sleep(500 * time.Millisecond)
	}
	mu.Lock()
	dead, counterDead := 0, 0
	byKind := map[string]int{}
	for k := range refused {
		if strings.HasPrefix(k, "counter-apply|") {
			counterDead++
			continue
		}
		dead++
		switch apply, views := refuses(k[strings.Index(k, "|")+1:]); {
		case apply && views:
			byKind["both"]++
		case apply:
			byKind["history only"]++
		default:
			byKind["views only"]++
		}
	}
	mu.Unlock()
	t.Logf("dead-lettering: %d history deliveries refused %d times each (%v), %d reaction messages", dead, attempts, byKind, counterDead)
	if byKind["both"] == 0 || byKind["history only"] == 0 || byKind["views only"] == 0 || counterDead == 0 {
		t.Fatalf("the drill dead-lettered too little of each kind: %v, %d reaction messages", byKind, counterDead)
	}

	// The loss is visible before the replay: views short of the model.
	ctx := context.Background()
	want := l.Model.Counts()
	counted, _, err := st.counts.Totals(ctx, l.Model.Keys())
	if err != nil {
		t.Fatal(err)
	}
	short := 0
	for k, w := range want {
		short += int(w.Views - counted[k].Views)
	}
	expect(t, "views missing before the replay", short > 0)

	// A dry run finds them all (Pub/Sub may still be moving the last ones
	// to the dead-letter topic) and leaves them: a second dry run finds
	// them again.
	dry := func(topic string) replay.Report {
		t.Helper()
		var out bytes.Buffer
		rep, err := replay.Run(ctx, st.clients.PubSub, top.PubSub, replay.Options{Topic: topic, DryRun: true, Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	deadOf := map[string]int{"history-events": dead, "counter-events": counterDead}
	for topic, n := range deadOf {
		for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
			if rep := dry(topic); rep.WouldRepublish == n {
				break
			} else if time.Since(start) > time.Minute {
				t.Fatalf("dry run of %s: %v; want %d to republish", topic, rep, n)
			}
		}
		if rep := dry(topic); rep.WouldRepublish != n || rep.Republished != 0 {
			t.Errorf("a second dry run of %s: %v; want the same %d left", topic, rep, n)
		}
	}

	// The fix, then the replay, in small batches.
	mu.Lock()
	broken = false
	mu.Unlock()
	for _, topic := range []string{"history-events", "counter-events"} {
		var out bytes.Buffer
		rep, err := replay.Run(ctx, st.clients.PubSub, top.PubSub, replay.Options{Topic: topic, Batch: 7, Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("replay of %s:\n%s", topic, out.String())
		if n := deadOf[topic]; rep.Republished != n || rep.Failed != 0 || rep.Poison != 0 || rep.TooOld != 0 {
			t.Errorf("replay of %s: %v; want %d republished and nothing else", topic, rep, n)
		}
		if rep, err := replay.Run(ctx, st.clients.PubSub, top.PubSub, replay.Options{Topic: topic}); err != nil || rep.Pulled != 0 {
			t.Errorf("a second replay of %s: %v, %v; want nothing left", topic, rep, err)
		}
	}

	// Exact, and no reconciliation corrects anything (settle), though each
	// consumer applied copies of batches it had applied before.
	st.settle(t, l.Model)
	checkAnswers(t, l.Rec.Samples(), st.cfg.HTTP.RequestTimeout)
	mu.Lock()
	defer mu.Unlock()
	again := map[string]int{}
	for k, n := range applied {
		if n > 1 {
			again[k[:strings.Index(k, "|")]]++
		}
	}
	t.Logf("batches applied more than once, by subscription: %v", again)
	expect(t, "ApplyHistory and ApplyViews each applied a batch again", again["history-apply"] > 0 && again["history-views"] > 0)
}
