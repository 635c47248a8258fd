package rollup

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/events"
)

type fakeStore struct {
	mu    sync.Mutex
	folds []time.Time
	fail  bool
	stale []events.Event
}

func (f *fakeStore) Fold(context.Context) (counterstore.FoldStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.folds = append(f.folds, time.Now())
	if f.fail && len(f.folds) == 1 {
		return counterstore.FoldStats{}, errors.New("spanner down")
	}
	return counterstore.FoldStats{Counters: 1, Shards: 2, Resized: map[string]int{"hot": 8}}, nil
}

func (f *fakeStore) Stale(context.Context, time.Duration) ([]events.Event, error) {
	return f.stale, nil
}

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
	if rec.Code != 400 {
		t.Fatalf("bad body: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/internal/rollup", nil))
	if rec.Code != 405 {
		t.Fatalf("GET: %d", rec.Code)
	}
}
