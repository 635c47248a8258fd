package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/topology"
)

// Drill 1. Pub/Sub delivers every message twice or more, and out of order.
// The event proxy applies the first delivery of each message and answers
// 500 (an ack lost on the way back), so Pub/Sub redelivers it; it also
// replays that delivery to the function up to 2.5 s later, after newer
// messages; and it publishes one message in three again (a publisher's
// retry after a lost publish ack: a new message id, the same events).
func TestDrillRedeliveredOutOfOrder(t *testing.T) {
	st := startStack(t, stackOptions{})
	r := newRedeliverer(st)
	st.proxy.setFault(r.fault)
	l := startLoad(st, workload.Spec{HistoryDeletes: true, Reactors: 4, Watchers: 3, Commenters: 2, Readers: 1, Keys: keys(6), Pace: 100 * time.Millisecond})
	time.Sleep(6 * time.Second)
	finish(t, l)
	st.settle(t, l.Model)
	r.wg.Wait()
	checkAnswers(t, l.Rec.Samples(), st.cfg.HTTP.RequestTimeout)
	r.check(t)
}

type redeliverer struct {
	st      *drillStack
	topicOf map[string]string // subscription → topic
	wg      sync.WaitGroup

	mu         sync.Mutex
	newest     map[string]time.Time // subscription → newest publish time applied
	copied     map[string]bool
	firsts     int
	replays    int
	outOfOrder int
	copies     int
}

func newRedeliverer(st *drillStack) *redeliverer {
	r := &redeliverer{st: st, topicOf: map[string]string{}, newest: map[string]time.Time{}, copied: map[string]bool{}}
	for _, topic := range topology.MustLoad().PubSub.Topics {
		for _, s := range topic.Subscriptions {
			r.topicOf[s.Name] = topic.Name
		}
	}
	return r
}

func (r *redeliverer) forward(d delivery) int {
	code := r.st.proxy.forward(context.Background(), d)
	if code < 300 {
		r.mu.Lock()
		if d.published.After(r.newest[d.sub]) {
			r.newest[d.sub] = d.published
		}
		r.mu.Unlock()
	}
	return code
}

func (r *redeliverer) fault(d delivery) (int, bool) {
	code := r.forward(d)
	if d.n > 1 {
		return code, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.firsts++
	delay := time.Duration(300+rand.IntN(2200)) * time.Millisecond
	r.wg.Go(func() {
		time.Sleep(delay)
		r.mu.Lock()
		if r.newest[d.sub].After(d.published) {
			r.outOfOrder++
		}
		r.replays++
		r.mu.Unlock()
		r.forward(d)
	})
	topic := r.topicOf[d.sub]
	h := fnv.New32a()
	h.Write([]byte(d.id))
	if d.attrs["drillCopy"] == "" && !r.copied[topic+"|"+d.id] && h.Sum32()%3 == 0 {
		r.copied[topic+"|"+d.id] = true
		r.copies++
		attrs := maps.Clone(d.attrs)
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["drillCopy"] = "1"
		r.wg.Go(func() {
			_, err := r.st.clients.PubSub.TopicAdminClient.Publish(context.Background(), &pubsubpb.PublishRequest{
				Topic:    emulators.TopicName(r.st.project, topic),
				Messages: []*pubsubpb.PubsubMessage{{Data: d.data, Attributes: attrs}},
			})
			if err != nil {
				r.st.t.Errorf("publish a copy: %v", err)
			}
		})
	}
	return http.StatusInternalServerError, true
}

// check waits until Pub/Sub has redelivered every message whose first
// delivery was refused, and reports the faults injected.
func (r *redeliverer) check(t *testing.T) {
	t.Helper()
	var once []string
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		once = once[:0]
		deliveries := r.st.proxy.deliveriesOf()
		for k, n := range deliveries {
			if n < 2 {
				once = append(once, k)
			}
		}
		if len(once) == 0 || time.Since(start) > 20*time.Second {
			total := 0
			for _, n := range deliveries {
				total += n
			}
			t.Logf("pubsub: %d messages, %d deliveries, %d replays (%d after a newer message), %d republished copies",
				len(deliveries), total, r.replays, r.outOfOrder, r.copies)
			break
		}
	}
	if len(once) > 0 {
		t.Errorf("messages delivered only once though their first delivery was refused: %v", once)
	}
	if r.firsts == 0 || r.replays == 0 || r.outOfOrder == 0 || r.copies == 0 {
		t.Errorf("the drill injected too little: %d messages, %d replays, %d out of order, %d copies", r.firsts, r.replays, r.outOfOrder, r.copies)
	}
}

// Drill 2. The event function's instance dies (process exit) after its
// store committed and before Pub/Sub got the ack, and before the commit, for
// every event function (ApplyViews: after its claims in Bigtable, before or
// after it staged the batch's views); each time a new instance takes over.
func TestDrillEventFunctionCrashes(t *testing.T) {
	probes := filepath.Join(t.TempDir(), "probes.jsonl")
	plans := []string{
		"ApplyCounters:after-commit:3",
		"ApplyCounters:before-commit:3",
		"ApplyHistory:after-commit:2",
		"ApplyHistory:before-commit:2",
		"ApplyViews:after-commit:2",
		"ApplyViews:before-commit:2",
	}
	st := startStack(t, stackOptions{child: true, childEnv: map[string]string{envStats: probes, envCrash: plans[0]}})
	l := startLoad(st, workload.Spec{HistoryDeletes: true, Reactors: 4, Watchers: 3, Commenters: 3, Keys: keys(5)})
	c := st.child.Load()
	for i := range plans {
		if code := st.waitExit(c, 30*time.Second); code != 3 {
			t.Fatalf("events child %d (%s) exited with %d; log:\n%s", c.n, plans[i], code, tail(c.log, 40))
		}
		next := ""
		if i+1 < len(plans) {
			next = plans[i+1]
		}
		c = st.startChild(map[string]string{envStats: probes, envCrash: next})
	}
	time.Sleep(2 * time.Second)
	finish(t, l)
	st.settle(t, l.Model)
	checkAnswers(t, l.Rec.Samples(), st.cfg.HTTP.RequestTimeout)

	lines, err := readProbes(probes)
	if err != nil {
		t.Fatal(err)
	}
	var crashes []probeLine
	for i, cr := range lines {
		if cr.Crash == "" {
			continue
		}
		crashes = append(crashes, cr)
		// The message the instance died on comes back to the next one. A
		// later crash line is no application: the next child may die on
		// the same redelivered message before its own commit.
		var again *probeLine
		for _, later := range lines[i+1:] {
			if later.Function == cr.Function && later.Crash == "" && later.Err == "" && slices.Equal(later.IDs, cr.IDs) {
				again = &later
				break
			}
		}
		switch {
		case again == nil:
			t.Errorf("%s crashed %s on events %v, which no later call applied", cr.Function, cr.Crash, cr.IDs)
		case cr.Function == "ApplyCounters" && cr.Crash == "after-commit" && (again.Applied != 0 || again.Duplicates != len(cr.IDs)):
			t.Errorf("%s redelivered after a crash after the commit: %d applied, %d duplicates; want 0 and %d", cr.Function, again.Applied, again.Duplicates, len(cr.IDs))
		case cr.Function == "ApplyViews":
			// Staged again, the same events in the same row: the fold
			// counts them once (settle checks the views exact).
			t.Logf("%s crashed %s on %d events; redelivered and staged again", cr.Function, cr.Crash, len(cr.IDs))
		case cr.Function != "ApplyHistory":
			t.Logf("%s crashed %s on %d events; redelivered: %d applied now, %d already", cr.Function, cr.Crash, len(cr.IDs), again.Applied, again.Duplicates)
		default:
			t.Logf("%s crashed %s on %v; redelivered and applied again", cr.Function, cr.Crash, cr.IDs)
		}
	}
	if len(crashes) != len(plans) {
		t.Errorf("%d crashes recorded, want %d: %+v", len(crashes), len(plans), crashes)
	}
}

// freezeUnderLoad runs spec's load (with history deletes, on six videos) on
// a stack of its own, freezes emulator for 10 s after 2 s of load, stops the
// load 4 s after the thaw and checks every answer against the spec. frozen
// is when the request deadline had passed for requests sent after the
// freeze began, to the thaw. during, when not nil, runs at frozen, the
// emulator still frozen, beside the load.
func freezeUnderLoad(t *testing.T, emulator string, spec workload.Spec, during func(st *drillStack, l *workload.Load)) (st *drillStack, l *workload.Load, samples []workload.Sample, frozen, to time.Time) {
	t.Helper()
	st = startStack(t, stackOptions{})
	spec.HistoryDeletes, spec.Keys, spec.Pace = true, keys(6), 100*time.Millisecond
	l = startLoad(st, spec)
	time.Sleep(2 * time.Second)
	from, to := outage(t, emulator, 10*time.Second, func(from time.Time) {
		if during != nil {
			time.Sleep(time.Until(from.Add(st.cfg.HTTP.RequestTimeout / 2)))
			during(st, l)
		}
	})
	time.Sleep(4 * time.Second)
	finish(t, l)
	samples = l.Rec.Samples()
	checkAnswers(t, samples, st.cfg.HTTP.RequestTimeout)
	return st, l, samples, from.Add(st.cfg.HTTP.RequestTimeout / 2), to
}

// Drill 3. The Spanner emulator stops answering for 10 s under load.
func TestDrillSpannerFrozen(t *testing.T) {
	st, l, samples, frozen, to := freezeUnderLoad(t, emulators.Spanner, workload.Spec{Reactors: 6, Watchers: 3, Commenters: 3, Readers: 2}, nil)
	expect(t, "reaction writes answered 503 while Spanner was frozen", workload.CountCode(workload.Between(samples, "PUT /v1/reactions", frozen, to), 503) > 0)
	expect(t, "counts reads answered 503 while Spanner was frozen",
		workload.CountCode(workload.Between(samples, "GET /v1/counts", frozen, to), 503)+
			workload.CountCode(workload.Between(samples, "GET /v1/me/counts", frozen, to), 503) > 0)
	expect(t, "history writes (no Spanner on their path) accepted while Spanner was frozen",
		workload.CountCode(workload.Between(samples, "POST /v1/history", frozen, to), 202) > 0)
	expectRecovery(t, samples, "PUT /v1/reactions", 200, to, 10*time.Second)
	st.settle(t, l.Model)
}

// Drill 4a. The Bigtable emulator stops answering for 10 s under load:
// watches are still accepted (through Pub/Sub) and all land once it is back.
// The load's watchers may all be waiting out a history delete by then (a
// delete needs Bigtable, and is retried until done), so a prober records a
// watch in the middle of the outage as well.
func TestDrillBigtableFrozen(t *testing.T) {
	probe := func(st *drillStack, l *workload.Load) {
		tok := st.token("prober")
		l.Model.AddUser("prober", tok)
		if err := l.RecordWatch("prober", tok, "probe-video", time.Now().UTC().Truncate(time.Millisecond)); err != nil {
			t.Error(err)
		}
	}
	st, l, samples, frozen, to := freezeUnderLoad(t, emulators.Bigtable, workload.Spec{Reactors: 2, Watchers: 5, Commenters: 2, Readers: 2}, probe)
	accepted := workload.CountCode(workload.Between(samples, "POST /v1/history", frozen, to), 202)
	expect(t, "history writes accepted while Bigtable was frozen", accepted > 0)
	expect(t, "history reads answered 503 while Bigtable was frozen", workload.CountCode(workload.Between(samples, "GET /v1/history", frozen, to), 503) > 0)
	expectRecovery(t, samples, "GET /v1/history", 200, to, 10*time.Second)
	t.Logf("%d watches accepted while Bigtable was frozen", accepted)
	st.settle(t, l.Model)
}

// Drill 4b. The Pub/Sub emulator stops answering for 10 s under load: a
// reaction, committed with its outbox row before the publish, is answered
// 200 (the publish gives up before the request's deadline and the outbox
// relay republishes it), a watch, which has no outbox, is answered 503 for
// the client to retry, no event is dropped, and pushes resume.
func TestDrillPubSubFrozen(t *testing.T) {
	st, l, samples, frozen, to := freezeUnderLoad(t, emulators.PubSub, workload.Spec{Reactors: 6, Watchers: 4, Commenters: 3, Readers: 1}, nil)
	expect(t, "reaction writes recorded (200) while Pub/Sub was frozen", workload.CountCode(workload.Between(samples, "PUT /v1/reactions", frozen, to), 200) > 0)
	expect(t, "history writes answered 503 while Pub/Sub was frozen", workload.CountCode(workload.Between(samples, "POST /v1/history", frozen, to), 503) > 0)
	expectRecovery(t, samples, "PUT /v1/reactions", 200, to, 10*time.Second)
	expectRecovery(t, samples, "POST /v1/history", 202, to, 10*time.Second)
	st.settle(t, l.Model)
}

// Drill 5. Poison messages — undecodable, or with a content id that fails
// validation — go to the dead-letter topic after the configured delivery
// attempts, and the messages behind them are not held up.
func TestDrillPoisonMessages(t *testing.T) {
	st := startStack(t, stackOptions{})
	top := topology.MustLoad()
	attempts := top.PubSub.Delivery.MaxDeliveryAttempts
	l := startLoad(st, workload.Spec{HistoryDeletes: true, Reactors: 2, Watchers: 2, Commenters: 2, Keys: keys(4), Pace: 200 * time.Millisecond})
	time.Sleep(time.Second)

	at := time.Now().UTC().Truncate(time.Millisecond)
	badWatch, _ := json.Marshal(history.Watch{
		EventID: history.WatchEventID("mallory", "no spaces allowed", at), UserID: "mallory",
		VideoID: "no spaces allowed", WatchedAt: at,
	})
	badCounter := fmt.Sprintf(`{"v":1,"events":[{"id":"poison-1","kind":"counterDelta","deltas":[{"key":"bad key!","field":"likes","n":1}],"time":%q}]}`, at.Format(time.RFC3339Nano))
	type poison struct {
		topic string
		data  []byte
		id    string
	}
	poisons := []*poison{
		{topic: "history-events", data: []byte("not json at all")},
		{topic: "history-events", data: badWatch},
		{topic: "counter-events", data: []byte(badCounter)},
		{topic: "counter-events", data: []byte{0xff, 0x00, 0xfe}},
	}
	ps := st.clients.PubSub
	ctx := context.Background()
	for _, p := range poisons {
		resp, err := ps.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{
			Topic: emulators.TopicName(st.project, p.topic), Messages: []*pubsubpb.PubsubMessage{{Data: p.data}},
		})
		if err != nil {
			t.Fatal(err)
		}
		p.id = resp.MessageIds[0]
	}
	published := time.Now()

	// Not held up: a watch and a like made after the poison are applied
	// while the poison is still being retried.
	prober := "prober"
	tok := st.token(prober)
	l.Model.AddUser(prober, tok)
	probeAt := time.Now().UTC().Truncate(time.Millisecond)
	if err := l.RecordWatch(prober, tok, "probe-video", probeAt); err != nil {
		t.Fatal(err)
	}
	if err := l.SetReaction(prober, tok, "probe-video", "like"); err != nil {
		t.Fatal(err)
	}
	var applied time.Duration
	for {
		got, err := st.api.History(tok)
		counted, _, cerr := st.counts.Totals(ctx, []string{"probe-video"})
		if err == nil && cerr == nil && len(got) == 1 && counted["probe-video"].Likes == 1 && counted["probe-video"].Views == 1 {
			applied = time.Since(published)
			break
		}
		if time.Since(published) > 20*time.Second {
			t.Fatalf("a watch and a like made after the poison were not applied within 20 s (history %v, %v; counts %v, %v)", got, err, counted, cerr)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every subscription of a poison's topic dead-letters it.
	want := map[string]int{}
	for _, p := range poisons {
		for _, topic := range top.PubSub.Topics {
			if topic.Name == p.topic {
				for _, s := range topic.Subscriptions {
					want[s.Name+"|"+string(p.data)]++
				}
			}
		}
	}
	got := map[string]int{}
	var dead time.Duration
	deadline := time.Now().Add(90 * time.Second)
	for len(got) < len(want) || !maps.Equal(got, want) {
		if time.Now().After(deadline) {
			t.Fatalf("dead-lettered after 90 s: %v, want %v", got, want)
		}
		for _, topic := range top.PubSub.Topics {
			for _, m := range pullAll(t, st, top.PubSub.DeadLetterSubscription(topic.DeadLetterTopic)) {
				src := m.Attributes["CloudPubSubDeadLetterSourceSubscription"]
				got[src+"|"+string(m.Data)]++
				if n := m.Attributes["CloudPubSubDeadLetterSourceDeliveryCount"]; n != fmt.Sprint(attempts) {
					t.Errorf("%q dead-lettered from %s after %s deliveries, want the configured %d", m.Data, src, n, attempts)
				}
			}
		}
		if dead == 0 && len(got) > 0 {
			dead = time.Since(published)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("poison: %d messages dead-lettered %d times (once per subscription of their topic) after %d deliveries each, the first %v after publishing; a watch and a like made meanwhile were applied within %v",
		len(poisons), len(want), attempts, dead.Round(100*time.Millisecond), applied.Round(10*time.Millisecond))
	expect(t, "messages behind the poison applied before it was dead-lettered", applied < dead)
	deliveries := st.proxy.deliveriesOf()
	for _, p := range poisons {
		for k, n := range deliveries {
			if strings.HasSuffix(k, "|"+p.id) && n != attempts {
				t.Errorf("poison %q delivered %d times on %s, want the configured %d", p.data, n, strings.TrimSuffix(k, "|"+p.id), attempts)
			}
		}
	}

	finish(t, l)
	// No valid message is dead-lettered (settle checks).
	st.settle(t, l.Model)
	checkAnswers(t, l.Rec.Samples(), st.cfg.HTTP.RequestTimeout)
}

// pullAll takes (and acknowledges) what a pull subscription holds now.
func pullAll(t *testing.T, st *drillStack, sub string) []*pubsubpb.PubsubMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sc := st.clients.PubSub.SubscriptionAdminClient
	name := emulators.SubscriptionName(st.project, sub)
	resp, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: name, MaxMessages: 100})
	if err != nil {
		t.Fatalf("pull %s: %v", sub, err)
	}
	var out []*pubsubpb.PubsubMessage
	var acks []string
	for _, m := range resp.ReceivedMessages {
		out = append(out, m.Message)
		acks = append(acks, m.AckId)
	}
	if len(acks) > 0 {
		if err := sc.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: name, AckIds: acks}); err != nil {
			t.Fatalf("ack %s: %v", sub, err)
		}
	}
	return out
}

func expect(t *testing.T, what string, ok bool) {
	t.Helper()
	if !ok {
		t.Errorf("expected: %s", what)
	}
}

// expectRecovery checks that op was answered code within d of the end of an
// outage, by itself.
func expectRecovery(t *testing.T, samples []workload.Sample, op string, code int, end time.Time, d time.Duration) {
	t.Helper()
	first := time.Time{}
	for _, s := range samples {
		if done := s.At.Add(s.Latency); s.Op == op && s.Code == code && done.After(end) && (first.IsZero() || done.Before(first)) {
			first = done
		}
	}
	switch after := first.Sub(end); {
	case first.IsZero():
		t.Errorf("%s: never answered %d after the outage", op, code)
	case after > d:
		t.Errorf("%s: first %d %v after the outage, want within %v", op, code, after.Round(10*time.Millisecond), d)
	default:
		t.Logf("%s: first %d %v after the outage", op, code, after.Round(10*time.Millisecond))
	}
}

// Drill 6. Watches still in flight when their video is deleted, or the
// history cleared, stay deleted when they arrive (their video has no entry
// at the time); a watch accepted after the clear is shown. ApplyHistory's
// deliveries are refused (Pub/Sub redelivers them) until all of it is done.
func TestDrillHistoryDeletedWhileInFlight(t *testing.T) {
	st := startStack(t, stackOptions{})
	var mu sync.Mutex
	hold, held, applied := true, map[string]bool{}, map[string]bool{}
	st.proxy.setFault(func(d delivery) (int, bool) {
		if d.sub != "history-apply" {
			return 0, false
		}
		mu.Lock()
		if hold {
			held[d.id] = true
			mu.Unlock()
			return http.StatusServiceUnavailable, true
		}
		mu.Unlock()
		code := st.proxy.forward(context.Background(), d)
		if code < 300 {
			mu.Lock()
			applied[d.id] = true
			mu.Unlock()
		}
		return code, true
	})
	l := startLoad(st, workload.Spec{Keys: keys(1)})
	tok := st.token("alice")
	l.Model.AddUser("alice", tok)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, step := range []func() error{
		func() error { return l.RecordWatch("alice", tok, "deleted", now.Add(-3*time.Hour)) },
		func() error { return l.DeleteVideo("alice", tok, "deleted") },
		func() error { return l.RecordWatch("alice", tok, "cleared", now.Add(-2*time.Hour)) },
		func() error { return l.ClearHistory("alice", tok) },
		func() error { return l.RecordWatch("alice", tok, "after", now.Add(-4*time.Hour)) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// Each watch reached ApplyHistory (and was refused) before any applied.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(held)
		if n == 3 {
			hold = false
		}
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%d of 3 watches delivered within 20 s", n)
		}
	}
	// Every watch is applied before the history is compared.
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := len(applied)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d of 3 watches applied 30 s after the deliveries resumed", n)
		}
	}
	finish(t, l)
	st.settle(t, l.Model)
	if got, err := st.api.History(tok); err != nil || len(got) != 1 || got[0].Video != "after" {
		t.Errorf("history after the deletions: %+v, %v; want only the watch recorded after them", got, err)
	}
}
