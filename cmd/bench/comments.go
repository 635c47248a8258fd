// The comments section (-only comments): comments and their counts on the
// local stack (the functions served in process over real stores, Pub/Sub
// pushing to the real consumer):
//
//  1. one hot video: comments/s accepted (HTTP 201) and counted end to end
//     (HTTP → Spanner + outbox → Pub/Sub → ApplyCounters → Spanner shards),
//     with the Spanner commits and Pub/Sub messages it took and the shard
//     count the hot counter reached;
//  2. a spam sweep of 10,000 of those comments in calls of 1,000: the time
//     per call, the time until the count reflects it, and the exact final
//     count against the source of truth (visible comments in Spanner), then
//     a reconciliation run that must find nothing to correct.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/cmd/internal/benchreport"
	"github.com/videngage/engagement/cmd/internal/benchstack"
	commentsfn "github.com/videngage/engagement/functions/comments"
	moderationfn "github.com/videngage/engagement/functions/moderation"
	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
)

type commentsOptions struct {
	comments    int
	spam        int
	sweep       int
	concurrency int
	timeout     time.Duration
	out         string // also write the report here
}

func (o commentsOptions) check() error {
	if o.spam > o.comments || o.sweep < 1 || o.sweep > 1000 || o.concurrency < 1 {
		return errors.New("want 0 ≤ -spam ≤ -comments, 1 ≤ -sweep ≤ 1000 and -concurrency ≥ 1")
	}
	return nil
}

// runCommentsBench runs the comments section on a world of its own in es.
func runCommentsBench(ctx context.Context, es *emulators.Stack, o commentsOptions) error {
	srv, err := benchstack.StartServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	cfg, teardown, err := benchstack.Provision(ctx, es, srv, fmt.Sprintf("bench-comments-%d", os.Getpid()), map[string]string{
		"RATE_LIMITS": "off", // one bench user posts far more than 10 a minute
	})
	if err != nil {
		return err
	}
	defer teardown()
	st, err := newCommentsStack(ctx, cfg, srv)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Fprintf(os.Stderr, "bench: comments: %d comments on one video, %d clients…\n", o.comments, o.concurrency)
	return runComments(ctx, st, o)
}

// commentsStack is the functions of the comments section's world, served as the local stack
// serves them: the counter functions every benchmark serves
// (benchstack.Stack) and the Comments API.
type commentsStack struct {
	*benchstack.Stack
	url string
	srv *benchstack.Server
}

func newCommentsStack(ctx context.Context, cfg *config.Config, srv *benchstack.Server) (*commentsStack, error) {
	bs, err := benchstack.New(ctx, "bench", cfg, srv, func(st *benchstack.Stack, mux *http.ServeMux) error {
		deps, err := commentsfn.Build(ctx, st.Clients)
		if err != nil {
			return err
		}
		comments := commentsfn.New(deps)
		mux.Handle("/v1/videos/", comments)
		mux.Handle("/v1/comments/", comments)
		mdeps, err := moderationfn.Build(st.Clients)
		if err != nil {
			return err
		}
		mux.Handle("/v1/moderation/spam", moderationfn.New(mdeps))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &commentsStack{Stack: bs, url: srv.URL, srv: srv}, nil
}

const hotVideo = "hot-video"

func runComments(ctx context.Context, st *commentsStack, o commentsOptions) error {
	stamp := benchreport.Start(fmt.Sprintf("go run ./cmd/withemulators -- go run ./cmd/bench -only comments -comments %d -spam %d -sweep %d -concurrency %d -comments-out docs/benchmarks/comments.md",
		o.comments, o.spam, o.sweep, o.concurrency))
	client := benchstack.NewClient(o.concurrency, 60*time.Second)
	tokens := make([]string, o.concurrency)
	for i := range tokens {
		t, err := st.Issuer.Mint(fmt.Sprintf("viewer-%d", i))
		if err != nil {
			return err
		}
		tokens[i] = t
	}
	mod, err := st.Issuer.Mint("moderator", localauth.Moderator())
	if err != nil {
		return err
	}
	// Warm up: connections, the key set, one counted comment elsewhere.
	if code, b, err := do(client, "POST", st.url+"/v1/videos/warmup/comments", tokens[0], `{"text":"warm"}`); err != nil || code != 201 {
		return fmt.Errorf("warm-up: %d %s %v", code, b, err)
	}
	time.Sleep(time.Second)

	// 1. The hot video. Every post carries an Idempotency-Key, so a retry
	// after a 503 or a lost answer can never post (or count) twice.
	before := otelcount.Global().Spanner()
	topic := st.Config.PubSub.CounterTopic
	published := func() (messages, bytes int64) {
		p := otelcount.Global().Published()
		return p.Messages[topic], p.Bytes[topic]
	}
	m0, b0 := published()
	pn0, pb0 := st.srv.Pushes("ApplyCounters")
	cpu0 := processCPU()
	ids := make([]string, o.comments)
	var next, retries atomic.Int64
	errs := make(chan error, o.concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < o.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= o.comments {
					return
				}
				body := []byte(fmt.Sprintf(`{"text":"comment %d: what a video"}`, i))
				key := fmt.Sprintf("bench-%d", i)
				for attempt := 0; ; attempt++ {
					code, b, err := do(client, "POST", st.url+"/v1/videos/"+hotVideo+"/comments", tokens[w], string(body), "Idempotency-Key", key)
					if err == nil && code == http.StatusCreated {
						var c struct{ ID string }
						if err := json.Unmarshal(b, &c); err != nil || c.ID == "" {
							errs <- fmt.Errorf("post answered %s", b)
							return
						}
						ids[i] = c.ID
						break
					}
					if attempt == 10 {
						errs <- fmt.Errorf("post %d: %d %s %v", i, code, b, err)
						return
					}
					retries.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	acceptedIn := time.Since(start)
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	countedIn, err := st.waitCounted(ctx, int64(o.comments), start, o.timeout)
	if err != nil {
		return err
	}
	after := otelcount.Global().Spanner()
	cpu := processCPU() - cpu0
	pn1, pb1 := st.srv.Pushes("ApplyCounters")
	m1, b1 := published()
	time.Sleep(st.Config.Counters.RollupInterval + time.Second) // a fold sets the shard count
	shards, err := st.Folds.ShardCount(ctx, hotVideo)
	if err != nil {
		return err
	}

	// 2. The spam sweep, in calls of o.sweep ids.
	sweepStart := time.Now()
	var slowest time.Duration
	calls := 0
	for i := 0; i < o.spam; i += o.sweep {
		batch := ids[i:min(i+o.sweep, o.spam)]
		body, _ := json.Marshal(map[string][]string{"commentIds": batch})
		t0 := time.Now()
		code, b, err := do(client, "POST", st.url+"/v1/moderation/spam", mod, string(body))
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("spam call %d: %d %s %v", calls, code, b, err)
		}
		var res struct{ Updated int }
		if err := json.Unmarshal(b, &res); err != nil || res.Updated != len(batch) {
			return fmt.Errorf("spam call %d answered %s, want %d updated", calls, b, len(batch))
		}
		slowest = max(slowest, time.Since(t0))
		calls++
	}
	sweptIn := time.Since(sweepStart)
	want := int64(o.comments - o.spam)
	sweepCountedIn, err := st.waitCounted(ctx, want, sweepStart, o.timeout)
	if err != nil {
		return err
	}
	m2, _ := published()

	// 3. Exactness, after the rollup has folded.
	time.Sleep(st.Config.Counters.RollupInterval + time.Second)
	code, b, err := do(client, "GET", st.url+"/v1/counts?ids="+hotVideo, "", "")
	if err != nil || code != 200 {
		return fmt.Errorf("counts: %d %s %v", code, b, err)
	}
	var api struct {
		Counts map[string]struct{ Comments int64 } `json:"counts"`
	}
	if err := json.Unmarshal(b, &api); err != nil {
		return err
	}
	counted, pending, err := st.Counts.Totals(ctx, []string{hotVideo})
	if err != nil {
		return err
	}
	var truth map[string]counter.Values
	err = st.DB.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		truth, err = commentstore.Source{}.Truth(ctx, tx, []string{hotVideo})
		return err
	})
	if err != nil {
		return err
	}
	code, b, err = do(client, "POST", st.url+"/internal/reconcile", "", `{"scope":"all"}`)
	if err != nil || code != 200 {
		return fmt.Errorf("reconcile: %d %s %v", code, b, err)
	}
	var rep reconcilestore.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return err
	}

	n := float64(o.comments)
	fmt.Printf("\nComments on the local stack (emulators, one process, 2 cores): %d clients\n\n", o.concurrency)
	fmt.Printf("1. one hot video, %d comments\n", o.comments)
	fmt.Printf("   accepted (HTTP 201)                       %8.0f comments/s  (%.2f s, %d retries)\n", n/acceptedIn.Seconds(), acceptedIn.Seconds(), retries.Load())
	fmt.Printf("   counted end to end (exact count reached)  %8.0f comments/s  (%.2f s)\n", n/countedIn.Seconds(), countedIn.Seconds())
	fmt.Printf("   Spanner rw commits per 1,000 comments     %8.0f  (writes, consumer and folds)\n", float64(after.Commits-before.Commits)*1000/n)
	fmt.Printf("   Pub/Sub messages per 1,000 comments       %8.0f  (%.0f comments per message)\n", float64(m1-m0)*1000/n, n/max(float64(m1-m0), 1))
	fmt.Printf("   Spanner row writes / read calls per 1,000 %8.0f / %.0f\n", float64(after.RowWrites-before.RowWrites)*1000/n, float64(after.Reads-before.Reads)*1000/n)
	byTable := after.Minus(before).WritesByTable
	for _, t := range slices.Sorted(maps.Keys(byTable)) {
		fmt.Printf("     %-40s %8.0f\n", t, float64(byTable[t])*1000/n)
	}
	fmt.Printf("   process CPU per comment (clients too)     %8d µs\n", (cpu / time.Duration(n)).Microseconds())
	pushTime := (pb1 - pb0) / time.Duration(max(pn1-pn0, 1))
	fmt.Printf("   ApplyCounters time a message              %8.1f ms  (%d messages)\n", float64(pushTime.Microseconds())/1000, pn1-pn0)
	fmt.Printf("   shards of the hot counter after the run   %8d\n", shards)
	fmt.Printf("2. spam sweep of %d comments in %d calls of ≤%d ids\n", o.spam, calls, o.sweep)
	fmt.Printf("   sweep calls answered in                   %8.2f s   (slowest call %.2f s)\n", sweptIn.Seconds(), slowest.Seconds())
	fmt.Printf("   count reflects the sweep after            %8.2f s   (%d messages for the sweep)\n", sweepCountedIn.Seconds(), m2-m1)
	fmt.Printf("3. final count of %s\n", hotVideo)
	fmt.Printf("   GET /v1/counts                            %8d\n", api.Counts[hotVideo].Comments)
	fmt.Printf("   counted (snapshot + shards) / pending     %8d / %d\n", counted[hotVideo].Comments, pending[hotVideo].Comments)
	fmt.Printf("   source of truth (visible comments)        %8d  (expected %d)\n", truth[hotVideo].Comments, want)
	fmt.Printf("   reconciliation afterwards                 %8d corrections of %d counters checked\n", rep.Corrected, rep.Checked)
	exact := api.Counts[hotVideo].Comments == truth[hotVideo].Comments && truth[hotVideo].Comments == want &&
		counted[hotVideo].Comments == want && pending[hotVideo].Comments == 0 && rep.Corrected == 0
	fmt.Printf("   exact                                     %8v\n", exact)
	if !exact {
		return errors.New("the final count is not exact")
	}
	per := func(x int64) float64 { return float64(x) * 1000 / n }
	if o.out != "" {
		var b strings.Builder
		fmt.Fprintf(&b, "%d comments on one video from %d clients (each post with an Idempotency-Key, rate limits off, the spam rules on), then a spam sweep of %d, on the local stack: the Comments API, Pub/Sub pushing to ApplyCounters and the rollup in one process over the emulators. ", o.comments, o.concurrency, o.spam)
		b.WriteString("Spanner work is counted on the wire (spannerdb's interceptors) from the first post until the count is exact: the posts' transactions, the consumer's and the folds'. Counts do not depend on the machine's load; the rates do (see uptime).\n\n")
		fmt.Fprintf(&b, "| per 1,000 comments | |\n|---|---:|\n")
		fmt.Fprintf(&b, "| Spanner row writes | %.0f |\n", per(after.RowWrites-before.RowWrites))
		for _, t := range slices.Sorted(maps.Keys(byTable)) {
			fmt.Fprintf(&b, "| — %s | %.0f |\n", t, per(byTable[t]))
		}
		fmt.Fprintf(&b, "| Spanner commits | %.0f |\n| Spanner read calls | %.0f |\n| rows read | %.0f |\n| Pub/Sub messages | %.0f |\n\n",
			per(after.Commits-before.Commits), per(after.Reads-before.Reads), per(after.RowsRead-before.RowsRead), per(m1-m0))
		fmt.Fprintf(&b, "Accepted %.0f comments/s, counted end to end %.0f comments/s; the final count %d equals the visible comments (%d) and reconciliation corrected nothing.\n",
			n/acceptedIn.Seconds(), n/countedIn.Seconds(), api.Counts[hotVideo].Comments, truth[hotVideo].Comments)
		if err := stamp.Write(o.out, "Comments on one hot video", b.String()); err != nil {
			return err
		}
	}
	record("comment.cpu_us", float64((cpu / time.Duration(n)).Microseconds()), "µs",
		"process CPU per hot-video comment until counted: Comments, ApplyCounters, Rollup and the benchmark's own clients in one process (an upper bound)")
	record("comment.spanner_commits_per_1000", per(after.Commits-before.Commits), "commits", "Spanner read-write commits per 1,000 comments (posts, consumer, folds)")
	record("comment.spanner_row_writes_per_1000", per(after.RowWrites-before.RowWrites), "rows", "Spanner row writes (mutations) per 1,000 comments")
	record("comment.spanner_reads_per_1000", per(after.Reads-before.Reads), "calls", "Spanner read and query calls per 1,000 comments")
	record("comment.messages_per_1000", per(m1-m0), "messages", "Pub/Sub messages published per 1,000 comments")
	record("comment.message_bytes_per_1000", per(b1-b0), "bytes", "Pub/Sub message data published per 1,000 comments")
	record("comment.clients", float64(o.concurrency), "clients", "concurrent clients of the comments run")
	record("comment.accepted_per_s", n/acceptedIn.Seconds(), "comments/s", "comments answered 201 per second, one serving process")
	record("comment.push_ms", float64(pushTime.Microseconds())/1000, "ms", "time ApplyCounters held a counter message of the run (one push at a time)")
	record("comment.counted_per_s", n/countedIn.Seconds(), "comments/s", "comments counted end to end per second, one ApplyCounters taking one push at a time")
	return nil
}

// waitCounted waits until the hot counter (snapshot + shards, nothing
// pending) holds want comments, and returns the time since start.
func (st *commentsStack) waitCounted(ctx context.Context, want int64, start time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		counted, _, err := st.Counts.Totals(ctx, []string{hotVideo})
		if err != nil {
			return 0, err
		}
		if got := counted[hotVideo].Comments; got == want {
			return time.Since(start), nil
		} else if time.Now().After(deadline) {
			return 0, fmt.Errorf("the count is %d after %v, want %d", got, timeout, want)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
