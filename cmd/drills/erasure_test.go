package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
)

var erasureFull = flag.Bool("erasure-full", false, "erasure drill at full size: 2,000 reactions, 500 comments, 100,000 history entries")

// erasureSize is the account the erasure drill erases.
type erasureSize struct{ reactions, comments, replies, entries int }

// Drill 8. An account with reactions, comments (with replies by another
// user) and history is erased while the EraseAccount instance is killed in
// the middle; the erasure resumes, every counter converges to exactly what
// the other user's data gives, a reconciliation corrects nothing, and the
// export is empty. A second account of the same size is then erased in
// this process to count what an erasure costs.
func TestDrillAccountErasureKilledMidway(t *testing.T) {
	size := erasureSize{reactions: 400, comments: 100, replies: 50, entries: 5000}
	if *erasureFull {
		size = erasureSize{reactions: 2000, comments: 500, replies: 250, entries: 100_000}
	}
	st := startStack(t, stackOptions{child: true, env: map[string]string{
		"ERASURE_SETTLE": "2s", "ERASURE_BUDGET": "2s", "ERASURE_STALLED_AFTER": "3s",
	}})
	ctx := context.Background()
	const user, other = "drill-erasee", "drill-other"
	seedStart := time.Now()
	before, after, keys := seedAccount(t, st, user, other, "dv", size)
	t.Logf("seeded %+v in %v", size, time.Since(seedStart).Round(time.Second))
	waitTotals(t, st, keys, before, 3*time.Minute)

	records := accountstore.New(st.db)
	start := time.Now()
	if code, body := st.call("DELETE", "/v1/me", user); code != 202 {
		t.Fatalf("DELETE /v1/me: %d %s", code, body)
	}
	// Kill the instance once it is into the comments (reactions done,
	// comments under way), then start a new one.
	var killedAt account.Phase
	for deadline := time.Now().Add(5 * time.Minute); killedAt == ""; {
		e, _, err := records.Get(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		if e.Phase == account.Comments && e.Comments > 0 || e.Phase == account.History {
			st.stopChild()
			killedAt = e.Phase
			t.Logf("EraseAccount killed at %s after %v: %d reactions, %d comments erased", e.Phase, time.Since(start).Round(time.Millisecond), e.Reactions, e.Comments)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the erasure did not reach the comments within 5 min: %+v", e)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st.startChild(nil)
	e := waitErased(t, st, user, 10*time.Minute)
	t.Logf("erasure done %v after DELETE /v1/me (killed once at %s): %d reactions, %d comments, %d history rows, %d steps",
		time.Since(start).Round(time.Millisecond), killedAt, e.Reactions, e.Comments, e.HistoryRows, e.Steps)
	if e.Reactions != int64(size.reactions) || e.Comments != int64(size.comments+5) {
		t.Logf("figures of the killed run (a killed step's count is not recorded): %+v", e.Figures)
	}

	waitTotals(t, st, keys, after, 3*time.Minute)
	st.checkReconcile(t)
	checkExportEmpty(t, st, user)
	st.checkNothingDeadLettered(t)

	// The cost of one erasure, measured in this process.
	const second = "drill-erasee-2"
	before2, after2, keys2 := seedAccount(t, st, second, "drill-other-2", "dv2", size)
	waitTotals(t, st, keys2, before2, 3*time.Minute)
	if _, err := records.Request(ctx, second); err != nil {
		t.Fatal(err)
	}
	bt, ops := countingBigtable(t, st)
	eraser := &account.Eraser{
		Records: records, Reactions: reactionstore.New(st.db), Comments: commentstore.New(st.db, 0),
		History: historystore.New(bt), Settings: historystore.NewSettings(st.clients.Firestore),
		RateLimits: func(ctx context.Context, u string) error { return ratelimit.EraseUser(ctx, bt, u) },
		Exports:    accountstore.NewExports(st.clients.Firestore, 0).EraseUser,
		Counters:   bus.NewPublisher(st.clients.PubSub, st.cfg.PubSub.CounterTopic),
		Settle:     0, Budget: time.Hour,
	}
	s0 := otelcount.Global().Spanner()
	t0 := time.Now()
	if more, err := eraser.Run(ctx, second); err != nil || more {
		t.Fatalf("in-process erasure: more %v, %v", more, err)
	}
	took := time.Since(t0)
	ds := otelcount.Global().Spanner().Minus(s0)
	e2, _, _ := records.Get(ctx, second)
	t.Logf("ERASURE COST %+v: %v; Spanner %d commits, %d row writes, %d reads; Bigtable %s; figures %+v",
		size, took.Round(time.Millisecond), ds.Commits, ds.RowWrites, ds.Reads, ops.String(), e2.Figures)
	waitTotals(t, st, keys2, after2, 3*time.Minute)
	checkExportEmpty(t, st, second)
}

// call sends an API request as uid and returns the status and body.
func (st *drillStack) call(method, path, uid string) (int, string) {
	st.t.Helper()
	req, _ := http.NewRequest(method, st.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+st.token(uid))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		st.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// seedAccount gives user size's reactions (other likes the first tenth of
// the same items too), top-level comments on video (other replies to the
// first size.replies of them; other posts 10 comments, and user replies 5
// times to the first), size.entries history entries and settings, through
// the stores and the counter topic as the functions do. It returns the
// counts before and after user's erasure and their keys.
func seedAccount(t *testing.T, st *drillStack, user, other, video string, size erasureSize) (before, after map[string]counter.Values, keys []string) {
	t.Helper()
	ctx := context.Background()
	pub := bus.NewPublisher(st.clients.PubSub, st.cfg.PubSub.CounterTopic)
	defer pub.Stop()
	reactions := reactionstore.New(st.db)
	comments := commentstore.New(st.db, 0)
	before, after = map[string]counter.Values{}, map[string]counter.Values{}
	add := func(m map[string]counter.Values, k string, f counter.Field, n int64) {
		v := m[k]
		v.Add(f, n)
		m[k] = v
	}
	publish := func(evs []events.Event) {
		if err := events.PublishAll(ctx, pub, evs); err != nil {
			t.Fatal(err)
		}
	}
	var reqs []reactionstore.SetRequest
	for i := range size.reactions {
		k := fmt.Sprintf("%s-r%05d", video, i)
		keys = append(keys, k)
		reqs = append(reqs, reactionstore.SetRequest{UserID: user, ContentID: k, To: reaction.Like})
		add(before, k, counter.Likes, 1)
		if i%10 == 0 {
			reqs = append(reqs, reactionstore.SetRequest{UserID: other, ContentID: k, To: reaction.Like})
			add(before, k, counter.Likes, 1)
			add(after, k, counter.Likes, 1)
		}
	}
	for len(reqs) > 0 {
		n := min(len(reqs), 500)
		res, err := reactions.SetMany(ctx, reqs[:n])
		if err != nil {
			t.Fatal(err)
		}
		var evs []events.Event
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			evs = append(evs, *r.Event)
		}
		publish(evs)
		reqs = reqs[n:]
	}
	post := func(rs []commentstore.CreateRequest) []string {
		var ids []string
		for len(rs) > 0 {
			n := min(len(rs), 100)
			res, err := comments.CreateMany(ctx, rs[:n])
			if err != nil {
				t.Fatal(err)
			}
			var evs []events.Event
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				ids = append(ids, r.Comment.ID)
				evs = append(evs, *r.Event)
			}
			publish(evs)
			rs = rs[n:]
		}
		return ids
	}
	var tops []commentstore.CreateRequest
	for range size.comments {
		tops = append(tops, commentstore.CreateRequest{UserID: user, VideoID: video, Text: "mine"})
	}
	own := post(tops)
	theirs := post(slicesRepeat(commentstore.CreateRequest{UserID: other, VideoID: video, Text: "theirs"}, 10))
	var replies []commentstore.CreateRequest
	for _, id := range own[:size.replies] {
		replies = append(replies, commentstore.CreateRequest{UserID: other, VideoID: video, ParentID: id, Text: "a reply"})
		add(before, id, counter.Replies, 1)
	}
	post(replies)
	post(slicesRepeat(commentstore.CreateRequest{UserID: user, VideoID: video, ParentID: theirs[0], Text: "my reply"}, 5))
	add(before, video, counter.Comments, int64(size.comments+size.replies+10+5))
	add(after, video, counter.Comments, 10)
	add(before, theirs[0], counter.Replies, 5)
	keys = append(keys, video, theirs[0])
	keys = append(keys, own[:size.replies]...)

	store := historystore.New(st.clients.Bigtable)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	base := time.Now().Add(-time.Hour)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(size.entries) {
					return
				}
				w := history.NewWatch(user, fmt.Sprintf("h%06d", i), base.Add(-time.Duration(i)*time.Second), 1)
				if err := store.Apply(ctx, w); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := historystore.NewSettings(st.clients.Firestore).Put(ctx, user, history.Settings{AutoDeleteMonths: 18}); err != nil {
		t.Fatal(err)
	}
	return before, after, keys
}

func slicesRepeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// waitTotals waits until every key's counted values equal want (zero when
// absent) with nothing pending.
func waitTotals(t *testing.T, st *drillStack, keys []string, want map[string]counter.Values, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		counted, pending, err := st.counts.Totals(context.Background(), keys)
		var diffs []string
		if err != nil {
			diffs = append(diffs, err.Error())
		}
		for _, k := range keys {
			if err != nil {
				break
			}
			c := counted[k]
			if w := want[k]; c.Likes != w.Likes || c.Dislikes != w.Dislikes || c.Comments != w.Comments || c.Replies != w.Replies {
				diffs = append(diffs, fmt.Sprintf("%s: counted %+v, want %+v", k, counted[k], w))
			}
			if p := pending[k]; !p.IsZero() {
				diffs = append(diffs, fmt.Sprintf("%s: pending %+v", k, p))
			}
		}
		if len(diffs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if len(diffs) > 20 {
				diffs = append(diffs[:20], fmt.Sprintf("… %d more", len(diffs)-20))
			}
			t.Fatalf("counters not exact within %v:\n%s", within, strings.Join(diffs, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitErased sends the erasure on as the scheduler would and waits until
// its record is done.
func waitErased(t *testing.T, st *drillStack, user string, within time.Duration) account.Erasure {
	t.Helper()
	records := accountstore.New(st.db)
	deadline := time.Now().Add(within)
	for last := time.Now(); ; {
		e, ok, err := records.Get(context.Background(), user)
		if err != nil {
			t.Fatal(err)
		}
		if ok && !e.Open() {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("the erasure is not done within %v: %+v", within, e)
		}
		if time.Since(last) > time.Second {
			st.internal("ResumeErasures", "/internal/resume-erasures")
			last = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkExportEmpty: nothing of the user is left to export.
func checkExportEmpty(t *testing.T, st *drillStack, user string) {
	t.Helper()
	code, body := st.call("GET", "/v1/me/export", user)
	var doc struct {
		Reactions, Comments, History []json.RawMessage
		Settings                     history.Settings
	}
	if code != 200 || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("export: %d %.300s", code, body)
	}
	if len(doc.Reactions)+len(doc.Comments)+len(doc.History) != 0 || doc.Settings != (history.Settings{}) {
		t.Errorf("export after the erasure is not empty: %d reactions, %d comments, %d entries, settings %+v",
			len(doc.Reactions), len(doc.Comments), len(doc.History), doc.Settings)
	}
}

// bigtableOps counts the Bigtable RPCs of a client by method, and the
// entries of its MutateRows calls.
type bigtableOps struct {
	mu    sync.Mutex
	calls map[string]int
}

func (o *bigtableOps) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.calls)
}

func countingBigtable(t *testing.T, st *drillStack) (*bigtable.Client, *bigtableOps) {
	ops := &bigtableOps{calls: map[string]int{}}
	count := func(method string) {
		m := method[strings.LastIndex(method, "/")+1:]
		ops.mu.Lock()
		ops.calls[m]++
		ops.mu.Unlock()
	}
	// Against the emulator the client dials its own connection and drops
	// dial options: give it one that counts.
	conn, err := grpc.NewClient(st.env["BIGTABLE_EMULATOR_HOST"], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			count(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			count(method)
			return streamer(ctx, desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := bigtable.NewClientWithConfig(context.Background(), st.cfg.Project, st.cfg.Bigtable.Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ops
}
