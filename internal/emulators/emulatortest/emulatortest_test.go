package emulatortest_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/topology"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

func pubsubClient(t *testing.T, cfg *config.Config) *pubsub.Client {
	t.Helper()
	c, err := pubsub.NewClient(t.Context(), cfg.Project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func publish(t *testing.T, c *pubsub.Client, project, topic string, data []byte) string {
	t.Helper()
	p := c.Publisher(emulators.TopicName(project, topic))
	defer p.Stop()
	id, err := p.Publish(t.Context(), &pubsub.Message{Data: data}).Get(t.Context())
	if err != nil {
		t.Fatalf("publish to %s/%s: %v", project, topic, err)
	}
	return id
}

// pullAll pulls what is waiting on a pull subscription, acknowledging it.
func pullAll(t *testing.T, c *pubsub.Client, project, sub string) []string {
	t.Helper()
	name := emulators.SubscriptionName(project, sub)
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.SubscriptionAdminClient.Pull(t.Context(), &pubsubpb.PullRequest{
			Subscription: name, MaxMessages: 100, ReturnImmediately: true})
		if err != nil {
			t.Fatalf("pull %s: %v", name, err)
		}
		if len(resp.ReceivedMessages) == 0 {
			if len(got) > 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var ids []string
		for _, m := range resp.ReceivedMessages {
			got = append(got, string(m.Message.Data))
			ids = append(ids, m.AckId)
		}
		if err := c.SubscriptionAdminClient.Acknowledge(t.Context(), &pubsubpb.AcknowledgeRequest{Subscription: name, AckIds: ids}); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func topicNames(t *testing.T, c *pubsub.Client, project string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	it := c.TopicAdminClient.ListTopics(t.Context(), &pubsubpb.ListTopicsRequest{Project: "projects/" + project})
	for {
		tp, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[tp.Name] = true
	}
	return got
}

func TestWorldsAreIsolated(t *testing.T) {
	top := topology.MustLoad()
	a, b := emulatortest.New(t), emulatortest.New(t)
	if a.Project == b.Project {
		t.Fatalf("two worlds share project %q", a.Project)
	}

	t.Run("pubsub", func(t *testing.T) {
		ca, cb := pubsubClient(t, a), pubsubClient(t, b)
		for _, w := range []struct {
			cfg *config.Config
			c   *pubsub.Client
		}{{a, ca}, {b, cb}} {
			want := map[string]bool{}
			for _, tp := range top.PubSub.Topics {
				want[emulators.TopicName(w.cfg.Project, tp.Name)] = true
				want[emulators.TopicName(w.cfg.Project, tp.DeadLetterTopic)] = true
			}
			got := topicNames(t, w.c, w.cfg.Project)
			if len(got) != len(want) {
				t.Errorf("project %s has topics %v, want %v", w.cfg.Project, got, want)
			}
			for n := range want {
				if !got[n] {
					t.Errorf("project %s lacks topic %s", w.cfg.Project, n)
				}
			}
		}
		topic := top.PubSub.Topics[0]
		sub := topic.Subscriptions[0].Name
		publish(t, ca, a.Project, topic.Name, []byte("for-a"))
		if got := pullAll(t, ca, a.Project, sub); len(got) != 1 || got[0] != "for-a" {
			t.Errorf("world a received %q, want [for-a]", got)
		}
		resp, err := cb.SubscriptionAdminClient.Pull(t.Context(), &pubsubpb.PullRequest{
			Subscription: emulators.SubscriptionName(b.Project, sub), MaxMessages: 10, ReturnImmediately: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ReceivedMessages) != 0 {
			t.Errorf("world b received %d messages published in world a", len(resp.ReceivedMessages))
		}
	})

	t.Run("spanner", func(t *testing.T) {
		ctx := t.Context()
		ca, err := spanner.NewClient(ctx, a.DatabasePath())
		if err != nil {
			t.Fatal(err)
		}
		defer ca.Close()
		cb, err := spanner.NewClient(ctx, b.DatabasePath())
		if err != nil {
			t.Fatal(err)
		}
		defer cb.Close()
		_, err = ca.Apply(ctx, []*spanner.Mutation{spanner.Insert("AppliedEvents",
			[]string{"EventId", "AppliedAt"}, []any{"event-1", spanner.CommitTimestamp})})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ca.Single().ReadRow(ctx, "AppliedEvents", spanner.Key{"event-1"}, []string{"EventId"}); err != nil {
			t.Errorf("world a cannot read its own row: %v", err)
		}
		_, err = cb.Single().ReadRow(ctx, "AppliedEvents", spanner.Key{"event-1"}, []string{"EventId"})
		if spanner.ErrCode(err) != codes.NotFound {
			t.Errorf("world b reading world a's row: err = %v, want NotFound", err)
		}
	})

	t.Run("bigtable", func(t *testing.T) {
		ctx := t.Context()
		table, family := top.Bigtable.Tables[0].Name, top.Bigtable.Tables[0].Families[0].Name
		ca, err := bigtable.NewClient(ctx, a.Project, a.Bigtable.Instance)
		if err != nil {
			t.Fatal(err)
		}
		defer ca.Close()
		cb, err := bigtable.NewClient(ctx, b.Project, b.Bigtable.Instance)
		if err != nil {
			t.Fatal(err)
		}
		defer cb.Close()
		m := bigtable.NewMutation()
		m.Set(family, "c", bigtable.Now(), []byte("v"))
		if err := ca.Open(table).Apply(ctx, "row-1", m); err != nil {
			t.Fatal(err)
		}
		if row, err := ca.Open(table).ReadRow(ctx, "row-1"); err != nil || len(row[family]) != 1 {
			t.Errorf("world a reads its row as %v, %v", row, err)
		}
		if row, err := cb.Open(table).ReadRow(ctx, "row-1"); err != nil || len(row) != 0 {
			t.Errorf("world b reads world a's row as %v, %v; want empty", row, err)
		}
	})
}

func TestBigtableGCPolicyFromTopology(t *testing.T) {
	top := topology.MustLoad()
	for _, tc := range []struct {
		name string
		opts []emulatortest.Option
		days int64
	}{
		{"topology default", nil, top.Bigtable.Defaults[emulators.HistoryMaxAgeVar]},
		{"override", []emulatortest.Option{emulatortest.WithHistoryMaxAgeDays(3)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := emulatortest.New(t, tc.opts...)
			if cfg.History.MaxAgeDays != int(tc.days) {
				t.Errorf("config History.MaxAgeDays = %d, want %d", cfg.History.MaxAgeDays, tc.days)
			}
			ac, err := bigtable.NewAdminClient(t.Context(), cfg.Project, cfg.Bigtable.Instance)
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			want := bigtable.MaxAgePolicy(time.Duration(tc.days) * 24 * time.Hour).String()
			for _, table := range top.Bigtable.Tables {
				info, err := ac.TableInfo(t.Context(), table.Name)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, f := range info.FamilyInfos {
					got[f.Name] = f.GCPolicy
				}
				if len(got) != len(table.Families) {
					t.Errorf("table %s has families %v, want %v", table.Name, got, table.Families)
				}
				for _, f := range table.Families {
					want := want
					if age, fixed, err := f.FixedMaxAge(); err != nil {
						t.Fatal(err)
					} else if fixed {
						// Not a history family: its age is topology.json's.
						want = bigtable.MaxAgePolicy(age).String()
					}
					if got[f.Name] != want {
						t.Errorf("table %s family %s GC policy = %q, want %q", table.Name, f.Name, got[f.Name], want)
					}
				}
			}
		})
	}
}

func TestSubscriptionsFromTopology(t *testing.T) {
	top := topology.MustLoad()
	endpoint := func(fn string) string { return "http://127.0.0.1:1/" + fn }
	cfg := emulatortest.New(t, emulatortest.WithPushEndpoint(endpoint))
	c := pubsubClient(t, cfg)
	d := top.PubSub.Delivery
	for _, topic := range top.PubSub.Topics {
		for _, s := range topic.Subscriptions {
			got, err := c.SubscriptionAdminClient.GetSubscription(t.Context(), &pubsubpb.GetSubscriptionRequest{
				Subscription: emulators.SubscriptionName(cfg.Project, s.Name)})
			if err != nil {
				t.Fatal(err)
			}
			checks := []struct {
				what      string
				got, want any
			}{
				{"topic", got.Topic, emulators.TopicName(cfg.Project, topic.Name)},
				{"push endpoint", got.GetPushConfig().GetPushEndpoint(), endpoint(s.Function)},
				{"ack deadline", got.AckDeadlineSeconds, int32(s.AckDeadline(d))},
				{"dead-letter topic", got.GetDeadLetterPolicy().GetDeadLetterTopic(), emulators.TopicName(cfg.Project, topic.DeadLetterTopic)},
				{"max delivery attempts", got.GetDeadLetterPolicy().GetMaxDeliveryAttempts(), int32(d.MaxDeliveryAttempts)},
				// The emulator strands refused messages under a retry
				// policy (see provisionPubSub): its default retry instead.
				{"retry policy", got.GetRetryPolicy() == nil, true},
				{"retention", got.GetMessageRetentionDuration().AsDuration(), time.Duration(d.MessageRetentionSeconds) * time.Second},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("subscription %s: %s = %v, want %v", s.Name, ch.what, ch.got, ch.want)
				}
			}
		}
		dl, err := c.SubscriptionAdminClient.GetSubscription(t.Context(), &pubsubpb.GetSubscriptionRequest{
			Subscription: emulators.SubscriptionName(cfg.Project, top.PubSub.DeadLetterSubscription(topic.DeadLetterTopic))})
		if err != nil {
			t.Fatalf("dead-letter subscription of %s: %v", topic.DeadLetterTopic, err)
		}
		if dl.Topic != emulators.TopicName(cfg.Project, topic.DeadLetterTopic) || dl.GetPushConfig().GetPushEndpoint() != "" {
			t.Errorf("dead-letter subscription %s: topic %s push %q; want a pull subscription on %s",
				dl.Name, dl.Topic, dl.GetPushConfig().GetPushEndpoint(), topic.DeadLetterTopic)
		}
	}
}

// pushRecorder answers each message's first delivery with 500 and the next
// ones with 204, recording every delivery.
type pushRecorder struct {
	mu         sync.Mutex
	deliveries map[string][]string // path -> message ids, in arrival order
	arrived    chan struct{}
}

func (p *pushRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Message struct {
			MessageID string `json:"messageId"`
			Data      []byte `json:"data"`
		} `json:"message"`
		Subscription string `json:"subscription"`
	}
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &body); err != nil || body.Message.MessageID == "" {
		http.Error(w, "not a push request: "+string(b), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.deliveries[r.URL.Path] = append(p.deliveries[r.URL.Path], body.Message.MessageID)
	first := len(p.deliveries[r.URL.Path]) == 1
	p.mu.Unlock()
	select {
	case p.arrived <- struct{}{}:
	default:
	}
	if first {
		http.Error(w, "fail the first delivery", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (p *pushRecorder) get(path string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.deliveries[path]...)
}

func TestPushDeliversAndRedeliversOnError(t *testing.T) {
	top := topology.MustLoad()
	rec := &pushRecorder{deliveries: map[string][]string{}, arrived: make(chan struct{}, 1)}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	cfg := emulatortest.New(t, emulatortest.WithPushEndpoint(func(fn string) string { return srv.URL + "/" + fn }))
	c := pubsubClient(t, cfg)

	topic := top.PubSub.Topics[0]
	id := publish(t, c, cfg.Project, topic.Name, []byte("hello"))

	deadline := time.After(30 * time.Second)
	for _, s := range topic.Subscriptions {
		path := "/" + s.Function
		for len(rec.get(path)) < 2 {
			select {
			case <-rec.arrived:
			case <-time.After(100 * time.Millisecond):
			case <-deadline:
				t.Fatalf("subscription %s: deliveries %v, want the message twice (500, then 204)", s.Name, rec.get(path))
			}
		}
	}
	// After the 204 nothing more arrives: the message is acknowledged.
	time.Sleep(3 * time.Second)
	for _, s := range topic.Subscriptions {
		if got := rec.get("/" + s.Function); len(got) != 2 || got[0] != id || got[1] != id {
			t.Errorf("subscription %s: deliveries %v, want [%s %s]", s.Name, got, id, id)
		}
	}
}

func TestSetPushEndpoint(t *testing.T) {
	top := topology.MustLoad()
	cfg := emulatortest.New(t) // pull subscriptions
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Path
	}))
	defer srv.Close()
	topic := top.PubSub.Topics[0]
	sub := topic.Subscriptions[0].Name
	hosts := emulatortest.Stack(t).Hosts
	if err := emulators.SetPushEndpoint(t.Context(), hosts, cfg.Project, sub, srv.URL+"/mine"); err != nil {
		t.Fatal(err)
	}
	publish(t, pubsubClient(t, cfg), cfg.Project, topic.Name, []byte("x"))
	select {
	case p := <-got:
		if p != "/mine" {
			t.Errorf("delivered to %s, want /mine", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no push delivery after SetPushEndpoint")
	}
	err := emulators.SetPushEndpoint(t.Context(), hosts, cfg.Project, "no-such-subscription", srv.URL)
	if status.Code(errorsUnwrapAll(err)) != codes.NotFound {
		t.Errorf("SetPushEndpoint on a missing subscription: %v, want NotFound", err)
	}
}

func errorsUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

func TestMainFailsWithoutEmulators(t *testing.T) {
	// This test binary again, with no stack to attach to and no emulators
	// installed: it must fail with the reason, not skip its tests.
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorldsAreIsolated$")
	for _, kv := range os.Environ() {
		if !strings.Contains(kv, "_EMULATOR_HOST=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CLOUDSDK_ROOT="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("test binary without emulators: %v, want exit status 1; output:\n%s", err, out)
	}
	for _, want := range []string{"FAIL: emulatortest", "google-cloud-cli-spanner-emulator", "CLOUDSDK_ROOT"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "PASS") || strings.Contains(string(out), "SKIP") {
		t.Errorf("tests ran without emulators:\n%s", out)
	}
}

func TestMainAttachesToARunningStack(t *testing.T) {
	// Main exported the stack's variables: a test binary started now reuses
	// that stack instead of starting its own.
	cmd := exec.Command(os.Args[0], "-test.v", "-test.run=^TestSubscriptionsFromTopology$")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("attached test binary: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "emulators started") || !strings.Contains(string(out), "--- PASS: TestSubscriptionsFromTopology") {
		t.Errorf("attached test binary did not just reuse the stack:\n%s", out)
	}
}

func TestMainFailsOnAStackThatIsGone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorldsAreIsolated$")
	cmd.Env = os.Environ()
	for k := range emulatortest.Stack(t).Env() {
		cmd.Env = append(cmd.Env, k+"="+gone)
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("test binary attached to nothing: %v, want exit status 1; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "do not answer") || strings.Contains(string(out), "PASS") {
		t.Errorf("output does not say the emulators do not answer:\n%s", out)
	}
}

func TestNewIsFast(t *testing.T) {
	// Measured, not asserted tightly: a world must stay cheap enough for
	// every test to have its own.
	start := time.Now()
	const n = 5
	for range n {
		emulatortest.New(t)
	}
	per := time.Since(start) / n
	t.Logf("New: %v per world", per)
	if per > 10*time.Second {
		t.Errorf("New takes %v per world", per)
	}
}
