package rollupfn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/views"
)

type fakeStore struct {
	mu     sync.Mutex
	folds  []time.Time
	opts   []foldstore.Pass
	fail   bool
	stale  []events.Event
	held   bool     // another holder has every lease
	leases []string // taken
}

func (f *fakeStore) FoldPart(_ context.Context, o foldstore.Pass) (foldstore.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.folds = append(f.folds, time.Now())
	f.opts = append(f.opts, o)
	if f.fail && len(f.folds) == 1 {
		return foldstore.Stats{}, errors.New("spanner down")
	}
	return foldstore.Stats{Counters: 1, Shards: 2, Resized: map[string]int{"hot": 8}}, nil
}

func (f *fakeStore) Stale(context.Context, time.Duration) ([]events.Event, error) {
	return f.stale, nil
}

func (f *fakeStore) Lease(_ context.Context, name, _ string, _ time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held {
		return false, nil
	}
	f.leases = append(f.leases, name)
	return true, nil
}

func (f *fakeStore) Release(context.Context, string, string) error { return nil }

type fakePub struct{ n int }

func (p *fakePub) Publish(context.Context, []byte, map[string]string) (string, error) {
	p.n++
	return "1", nil
}

func post(t *testing.T, h http.Handler, body string) Report {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/internal/rollup", strings.NewReader(body)))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var rep Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestTicksInsideThePeriod(t *testing.T) {
	// In a synctest bubble the minute runs on the bubble's clock: its
	// ticks and their spacing are exact, however loaded the machine.
	synctest.Test(t, func(t *testing.T) {
		s := &fakeStore{fail: true}
		pub := &fakePub{}
		s.stale = []events.Event{{ID: "e", Kind: events.KindCounterDelta, Outbox: true, Deltas: []counter.Delta{{Key: "k", Field: counter.Likes, N: 1}}}}
		h := New(Deps{Store: s, Publisher: pub, Interval: 100 * time.Millisecond, Period: 600 * time.Millisecond})
		start := time.Now()
		rep := post(t, h, `{}`)
		if took := time.Since(start); took > 700*time.Millisecond {
			t.Fatalf("the minute's loop overran its period: %v", took)
		}
		if rep.Ticks < 5 || rep.Ticks > 6 || len(s.folds) != rep.Ticks {
			t.Fatalf("%d ticks (%d folds) in 600 ms at 100 ms", rep.Ticks, len(s.folds))
		}
		if rep.Errors != 1 || rep.Counters != rep.Ticks-1 || rep.Resized["hot"] != 8 || rep.Relayed != 1 || pub.n != 1 {
			t.Fatalf("report %+v, %d published", rep, pub.n)
		}
		for i := 1; i < len(s.folds); i++ {
			if gap := s.folds[i].Sub(s.folds[i-1]); gap < 80*time.Millisecond {
				t.Fatalf("ticks %v apart", gap)
			}
		}
	})
}

func TestOnce(t *testing.T) {
	s := &fakeStore{}
	h := New(Deps{Store: s, Publisher: &fakePub{}, Interval: time.Second})
	if rep := post(t, h, `{"once":true}`); rep.Ticks != 1 {
		t.Fatalf("once: %+v", rep)
	}
	// An operator's bare POST rolls up now, once.
	if rep := post(t, h, ``); rep.Ticks != 1 {
		t.Fatalf("no body: %+v", rep)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/internal/rollup", strings.NewReader(`{"once":1}`)))
	if rec.Code != 400 || apitest.ReasonOf(rec.Body.Bytes()) != errs.WrongFieldType {
		t.Fatalf("bad body: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/internal/rollup", nil))
	if rec.Code != 405 || apitest.ReasonOf(rec.Body.Bytes()) != errs.MethodNotAllowed {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body)
	}
}

// TestPartitionLease: a scheduled run folds its partition under the
// partition's lease; one that finds the lease held folds nothing.
func TestPartitionLease(t *testing.T) {
	s := &fakeStore{}
	pub := &fakePub{}
	s.stale = []events.Event{{ID: "e", Kind: events.KindCounterDelta, Outbox: true, Deltas: []counter.Delta{{Key: "k", Field: counter.Likes, N: 1}}}}
	h := New(Deps{Store: s, Publisher: pub, Interval: 50 * time.Millisecond, Period: 60 * time.Millisecond})
	rep := post(t, h, `{"once":false,"partition":1,"partitions":4}`)
	if rep.Ticks != 1 || len(s.leases) != 1 || s.leases[0] != "rollup/4/1" || s.opts[0].Partition != 1 || s.opts[0].Partitions != 4 {
		t.Fatalf("report %+v, leases %v, folds %+v", rep, s.leases, s.opts)
	}
	if rep.Relayed != 0 || pub.n != 0 {
		t.Errorf("partition 1 relayed %d events: the relay is partition 0's", pub.n)
	}

	s = &fakeStore{held: true}
	rep = post(t, New(Deps{Store: s, Publisher: pub, Interval: 50 * time.Millisecond, Period: 60 * time.Millisecond}), `{"partition":0,"partitions":2}`)
	if !rep.Held || rep.Ticks != 0 || len(s.folds) != 0 {
		t.Errorf("held partition: report %+v, %d folds", rep, len(s.folds))
	}

	for _, b := range []string{`{"partition":2,"partitions":2}`, `{"partition":-1}`, `{"partitions":5000}`} {
		rec := httptest.NewRecorder()
		New(Deps{Store: &fakeStore{}, Publisher: pub}).ServeHTTP(rec, httptest.NewRequest("POST", "/internal/rollup", strings.NewReader(b)))
		if rec.Code != 400 || apitest.ReasonOf(rec.Body.Bytes()) != errs.InvalidValue {
			t.Errorf("%s: %d %s", b, rec.Code, rec.Body)
		}
	}
}

// TestViewsFoldOnTicksOfItsOwn: the views fold runs every ViewsInterval
// over the parts of the run's partition, beside the counters' ticks; a
// bare POST folds once.
func TestViewsFoldOnTicksOfItsOwn(t *testing.T) {
	// In a synctest bubble the minute runs on the bubble's clock: the
	// ticks are counted exactly, however loaded the machine.
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var calls []views.FoldOptions
		fold := func(_ context.Context, o views.FoldOptions) (views.FoldStats, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, o)
			if len(calls) == 2 {
				return views.FoldStats{}, errors.New("bigtable down")
			}
			return views.FoldStats{Batches: 3, Applied: 2}, nil
		}
		h := New(Deps{Store: &fakeStore{}, Publisher: &fakePub{}, Interval: 200 * time.Millisecond, Period: 600 * time.Millisecond,
			Views: fold, ViewsInterval: 50 * time.Millisecond})
		rep := post(t, h, `{"once":false,"partition":1,"partitions":2}`)
		if rep.ViewFolds < 9 || rep.ViewFolds > 12 || rep.ViewFolds != len(calls) {
			t.Fatalf("%d views folds (%d calls) in 600 ms at 50 ms", rep.ViewFolds, len(calls))
		}
		if rep.ViewBatches != 3*(rep.ViewFolds-1) || rep.ViewsApplied != 2*(rep.ViewFolds-1) || rep.Errors != 1 {
			t.Fatalf("report %+v", rep)
		}
		for _, o := range calls {
			if o.Lo != counter.Parts/2 || o.Hi != counter.Parts {
				t.Fatalf("partition 1 of 2 folded the views of parts [%d, %d)", o.Lo, o.Hi)
			}
		}
		calls = nil
		if rep := post(t, h, ``); rep.ViewFolds != 1 || len(calls) != 1 || calls[0].Lo != 0 || calls[0].Hi != counter.Parts {
			t.Fatalf("bare POST: %+v, calls %+v", rep, calls)
		}
	})
}

// TestHeldPartitionFoldsViews: a run that finds its partition held leaves
// the counters and the relay to the holder and folds the partition's staged
// views for its minute.
func TestHeldPartitionFoldsViews(t *testing.T) {
	s := &fakeStore{held: true}
	pub := &fakePub{}
	s.stale = []events.Event{{ID: "e", Kind: events.KindCounterDelta, Outbox: true, Deltas: []counter.Delta{{Key: "k", Field: counter.Likes, N: 1}}}}
	var folds []views.FoldOptions
	fold := func(_ context.Context, o views.FoldOptions) (views.FoldStats, error) {
		folds = append(folds, o)
		return views.FoldStats{}, nil
	}
	h := New(Deps{Store: s, Publisher: pub, Interval: 100 * time.Millisecond, Period: 600 * time.Millisecond,
		Views: fold, ViewsInterval: 50 * time.Millisecond})
	rep := post(t, h, `{"once":false,"partition":0,"partitions":2}`)
	if !rep.Held || rep.Ticks != 0 || len(s.folds) != 0 || pub.n != 0 {
		t.Fatalf("held partition: report %+v, %d counter folds, %d published", rep, len(s.folds), pub.n)
	}
	if rep.ViewFolds < 2 || len(folds) != rep.ViewFolds || folds[0].Lo != 0 || folds[0].Hi != counter.Parts/2 {
		t.Fatalf("held partition: %d views folds, %+v", rep.ViewFolds, folds)
	}
}

type fakeStaged struct {
	batches []views.Batch
	asked   []time.Time
	parts   [][2]int
}

func (f *fakeStaged) StagedBefore(_ context.Context, lo, hi int, t time.Time, _ int) ([]views.Batch, error) {
	f.asked = append(f.asked, t)
	f.parts = append(f.parts, [2]int{lo, hi})
	var out []views.Batch
	for _, b := range f.batches {
		if b.Written.Before(t) {
			out = append(out, b)
		}
	}
	return out, nil
}

// logLines captures the JSON log lines written while f runs.
func logLines(t *testing.T, f func()) []map[string]any {
	t.Helper()
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	defer slog.SetDefault(old)
	f()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if len(l) > 0 && json.Unmarshal(l, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestStalledCounters: outbox events and staged views batches older than
// StallAfter name their counters stalled in one line; younger ones, which
// the relay or the next fold still count, do not.
func TestStalledCounters(t *testing.T) {
	now := time.Now()
	like := func(key string, age time.Duration) events.Event {
		return events.Event{ID: "e-" + key, Kind: events.KindCounterDelta, Outbox: true, Time: now.Add(-age),
			Deltas: []counter.Delta{{Key: key, Field: counter.Likes, N: 1}}}
	}
	viewsOf := func(key string, age time.Duration) views.Batch {
		return views.Batch{Key: "b-" + key, Written: now.Add(-age), Events: []events.Event{{ID: "v-" + key, Kind: events.KindCounterDelta,
			Deltas: []counter.Delta{{Key: key, Field: counter.Views, N: 2}}}}}
	}
	run := func(s *fakeStore, staged *fakeStaged, body string) (Report, []map[string]any) {
		t.Helper()
		h := New(Deps{Store: s, Publisher: &fakePub{}, Interval: time.Second, Staged: staged, StallAfter: 10 * time.Minute})
		var rep Report
		lines := logLines(t, func() { rep = post(t, h, body) })
		var stalled []map[string]any
		for _, l := range lines {
			if l["msg"] == LogStalled {
				stalled = append(stalled, l)
			}
		}
		return rep, stalled
	}

	// Moving: relayed but younger than StallAfter, staged a second ago.
	s := &fakeStore{stale: []events.Event{like("moving", 3*time.Minute)}}
	staged := &fakeStaged{batches: []views.Batch{viewsOf("moving-views", time.Second)}}
	if rep, lines := run(s, staged, ``); rep.Stalled != 0 || len(lines) != 0 {
		t.Errorf("nothing stalled: report %+v, lines %v", rep, lines)
	}
	if len(staged.asked) != 1 || now.Add(-10*time.Minute).Sub(staged.asked[0]) > time.Second || staged.parts[0] != [2]int{0, counter.Parts} {
		t.Errorf("staged batches asked before %v of parts %v; want 10 min ago, every part", staged.asked, staged.parts)
	}

	// Stalled: an outbox event and a staged batch past StallAfter, and a
	// staged row that cannot be decoded.
	s.stale = append(s.stale, like("stuck", 11*time.Minute))
	staged.batches = append(staged.batches, viewsOf("stuck-views", 12*time.Minute), views.Batch{Key: "b-bad", Written: now.Add(-time.Hour), Err: errors.New("bad")})
	rep, lines := run(s, staged, ``)
	if rep.Stalled != 2 || len(lines) != 1 {
		t.Fatalf("stalled: report %+v, lines %v", rep, lines)
	}
	l := lines[0]
	keys, _ := l["keys"].([]any)
	if len(keys) != 2 || keys[0] != "stuck" || keys[1] != "stuck-views" || l["counters"] != 2.0 || l["outboxEvents"] != 1.0 ||
		l["viewBatches"] != 2.0 || l["undecodableBatches"] != 1.0 || l["oldestSeconds"].(float64) < 3600 || l["level"] != "ERROR" {
		t.Errorf("stalled line: %v", l)
	}

	// Partition 1 of 2 checks its own parts' staged views; the outbox is
	// partition 0's.
	staged.asked, staged.parts = nil, nil
	rep, lines = run(s, staged, `{"once":true,"partition":1,"partitions":2}`)
	if rep.Stalled != 1 || len(lines) != 1 || lines[0]["outboxEvents"] != 0.0 || staged.parts[0] != [2]int{counter.Parts / 2, counter.Parts} {
		t.Errorf("partition 1: report %+v, lines %v, parts %v", rep, lines, staged.parts)
	}
}
