package expirehistoryfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	expirehistoryfn "github.com/videngage/engagement/functions/expirehistory"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// world is a fresh project of the emulators with the history stores.
type world struct {
	store    *historystore.Store
	settings *historystore.Settings
}

func newWorld(t testing.TB) world {
	t.Helper()
	c, err := host.New(context.Background(), emulatortest.New(t), host.NeedBigtable|host.NeedFirestore)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return world{store: historystore.New(c.Bigtable), settings: historystore.NewSettings(c.Firestore)}
}

// countingStore counts Expire calls per user and fails the calls fail says.
type countingStore struct {
	expirehistoryfn.Store
	mu    sync.Mutex
	calls map[string]int
	fail  func(userID string) bool
}

func (s *countingStore) Expire(ctx context.Context, userID string, horizon time.Time) (int, error) {
	s.mu.Lock()
	s.calls[userID]++
	fail := s.fail != nil && s.fail(userID)
	s.mu.Unlock()
	if fail {
		return 0, fmt.Errorf("%w: injected", errs.ErrBackendUnavailable)
	}
	return s.Store.Expire(ctx, userID, horizon)
}

func post(t testing.TB, h http.Handler, body string) (int, expirehistoryfn.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	httpx.Standard("ExpireHistory", "p", nil, time.Minute)(h).ServeHTTP(rec, httptest.NewRequest("POST", "/internal/expire-history", strings.NewReader(body)))
	var rep expirehistoryfn.Report
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("answer %s: %v", rec.Body, err)
		}
	}
	return rec.Code, rep
}

func (w world) list(t *testing.T, userID string) []string {
	t.Helper()
	p, err := w.store.List(t.Context(), userID, nil, time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range p.Entries {
		out = append(out, e.VideoID)
	}
	return out
}

// The job removes every auto-deleting user's entries past their horizon
// (and nothing else) over runs of a bounded number of users, resuming
// where the last run stopped, and starts over once a pass is done.
func TestExpireHistory(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	month := func(m int) time.Time { return now.AddDate(0, -m, 0).Add(-time.Hour) }
	users := []struct {
		id     string
		s      history.Settings
		watch  map[string]time.Time
		remain []string // newest first
	}{
		{"u3", history.Settings{AutoDeleteMonths: 3}, map[string]time.Time{"a": month(1), "b": month(4), "c": month(20)}, []string{"a"}},
		{"u3-paused", history.Settings{Paused: true, AutoDeleteMonths: 3}, map[string]time.Time{"a": month(2), "b": month(3)}, []string{"a"}},
		{"u18", history.Settings{AutoDeleteMonths: 18}, map[string]time.Time{"a": month(17), "b": month(19)}, []string{"a"}},
		{"u36", history.Settings{AutoDeleteMonths: 36}, map[string]time.Time{"a": month(20), "b": month(35)}, []string{"a", "b"}},
		{"keep", history.Settings{}, map[string]time.Time{"a": month(1), "b": month(20)}, []string{"a", "b"}},
		{"no-settings", history.Settings{}, map[string]time.Time{"a": month(20)}, []string{"a"}},
		{"u3-empty", history.Settings{AutoDeleteMonths: 3}, nil, nil},
		{"u3/b#x", history.Settings{AutoDeleteMonths: 3}, map[string]time.Time{"a": month(5)}, nil},
	}
	for _, u := range users {
		if u.id != "no-settings" {
			if err := w.settings.Put(ctx, u.id, u.s); err != nil {
				t.Fatal(err)
			}
		}
		for v, at := range u.watch {
			if err := w.store.Apply(ctx, history.NewWatch(u.id, v, at, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	auto := 6 // users with auto-delete on
	store := &countingStore{Store: w.store, calls: map[string]int{}}
	h := expirehistoryfn.New(expirehistoryfn.Deps{Users: w.settings, Store: store, Page: 2, Now: func() time.Time { return now }})

	// Runs of 4 users, pages of 2: two runs make the pass; the second ends it.
	var got expirehistoryfn.Report
	for run := 1; ; run++ {
		if run > 3 {
			t.Fatal("the pass never ends")
		}
		code, rep := post(t, h, `{"users":4}`)
		if code != http.StatusOK {
			t.Fatalf("run %d: status %d", run, code)
		}
		if rep.Users > 4 {
			t.Fatalf("run %d took %d users, more than asked", run, rep.Users)
		}
		got.Users += rep.Users
		got.Entries += rep.Entries
		if rep.PassDone {
			break
		}
	}
	if want := (expirehistoryfn.Report{Users: auto, Entries: 5}); got != want {
		t.Errorf("the pass: %+v, want %+v", got, want)
	}
	for _, u := range users {
		if diff := cmp.Diff(u.remain, w.list(t, u.id)); diff != "" {
			t.Errorf("%s's history after the pass (-want +got):\n%s", u.id, diff)
		}
		want := 0
		if u.s.AutoDeleteMonths > 0 {
			want = 1
		}
		if store.calls[u.id] != want {
			t.Errorf("%s expired %d times in the pass, want %d", u.id, store.calls[u.id], want)
		}
	}
	// The next run starts over and finds nothing to remove.
	code, rep := post(t, h, ``)
	if code != http.StatusOK || rep != (expirehistoryfn.Report{Users: auto, PassDone: true}) {
		t.Errorf("run after the pass: %d %+v; want every auto-deleting user again and nothing removed", code, rep)
	}
}

// A run that fails resumes at its last recorded page: the users of the pages
// before it are not taken again in the same pass, and every user's expired
// entries go in the end.
func TestExpireHistoryResumes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ids []string
	for i := range 9 {
		id := fmt.Sprintf("user-%d", i)
		ids = append(ids, id)
		if err := w.settings.Put(ctx, id, history.Settings{AutoDeleteMonths: 3}); err != nil {
			t.Fatal(err)
		}
		for v, at := range map[string]time.Time{"new": now.AddDate(0, -1, 0), "old": now.AddDate(0, -4, 0)} {
			if err := w.store.Apply(ctx, history.NewWatch(id, v, at, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The job walks the users in document order.
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(historystore.DocID(a), historystore.DocID(b)) })
	broken := true
	store := &countingStore{Store: w.store, calls: map[string]int{}, fail: func(u string) bool { return broken && u == ids[4] }}
	h := expirehistoryfn.New(expirehistoryfn.Deps{Users: w.settings, Store: store, Page: 2, Workers: 1, Now: func() time.Time { return now }})

	if code, _ := post(t, h, ``); code != http.StatusServiceUnavailable {
		t.Fatalf("run with a failing backend: status %d, want 503", code)
	}
	// Pages [0 1] [2 3] done and recorded; [4 5] failed at its first user.
	broken = false
	code, rep := post(t, h, ``)
	if code != http.StatusOK || !rep.PassDone || rep.Users != 5 || rep.Entries < 4 {
		t.Fatalf("resumed run: %d %+v; want users 4..8 and the pass done", code, rep)
	}
	for i, id := range ids {
		if diff := cmp.Diff([]string{"new"}, w.list(t, id)); diff != "" {
			t.Errorf("%s after the resumed pass (-want +got):\n%s", id, diff)
		}
		want := 1
		if i == 4 || i == 5 {
			want = 2 // the failed page is redone
		}
		if store.calls[id] != want {
			t.Errorf("%s expired %d times, want %d", id, store.calls[id], want)
		}
	}
}

func TestExpireHistoryBadRequest(t *testing.T) {
	t.Parallel()
	h := expirehistoryfn.New(expirehistoryfn.Deps{Users: failingUsers{}, Store: nil})
	for _, body := range []string{`{"users":0}`, `{"users":-1}`, `{"users":100001}`, `{"users":"x"}`, `{"users":1,"x":1}`, `[`} {
		if code, _ := post(t, h, body); code != http.StatusBadRequest {
			t.Errorf("body %s: status %d, want 400", body, code)
		}
	}
	if code, _ := post(t, h, `{"users":10}`); code != http.StatusServiceUnavailable {
		t.Errorf("settings backend down: status %d, want 503", code)
	}
}

type failingUsers struct{}

var errDown = fmt.Errorf("%w: down", errs.ErrBackendUnavailable)

func (failingUsers) AutoDeleting(context.Context, string, int) ([]historystore.UserSettings, string, error) {
	return nil, "", errDown
}
func (failingUsers) Cursor(context.Context, string) (string, error) { return "", errDown }
func (failingUsers) SetCursor(context.Context, string, string) error {
	return errors.New("SetCursor must not be called when nothing was read")
}
