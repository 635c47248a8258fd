package expirehistoryfn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"

	expirehistoryfn "github.com/videngage/engagement/functions/expirehistory"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// world is a fresh project of the emulators with the history stores and
// the jobs' leases.
type world struct {
	store    *historystore.Store
	settings *historystore.Settings
	leases   *leasestore.Store
	fs       *firestore.Client
}

func newWorld(t testing.TB) world {
	t.Helper()
	c, err := host.New(context.Background(), emulatortest.New(t), host.NeedBigtable|host.NeedFirestore|host.NeedSpanner)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return world{
		store:    historystore.New(c.Bigtable),
		settings: historystore.NewSettings(c.Firestore),
		leases:   leasestore.New(spannerdb.Wrap(c.Spanner, c.Config), nil),
		fs:       c.Firestore,
	}
}

// deps are the handler's collaborators in w, with store counting Expire.
func (w world) deps(store expirehistoryfn.Store, now func() time.Time) expirehistoryfn.Deps {
	return expirehistoryfn.Deps{Users: w.settings, Store: store, Leases: w.leases, Page: 2, Now: now}
}

// legacyDone records the walk of unstamped documents as done, as it is
// once a deployment has stamped every document.
func (w world) legacyDone(t testing.TB) {
	t.Helper()
	if err := w.settings.SetCursor(t.Context(), "expire-history", historystore.JobCursor{PassStarted: time.Now(), PassEnded: time.Now()}); err != nil {
		t.Fatal(err)
	}
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

// took returns the calls per user so far and starts counting again.
func (s *countingStore) took() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = map[string]int{}
	return c
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
// (and nothing else), each partition in a pass of pages from its own
// cursor; a partition rests until Every after its pass began, then sweeps
// again.
func TestExpireHistory(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	clock := now
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
	for i := range 12 {
		users = append(users, struct {
			id     string
			s      history.Settings
			watch  map[string]time.Time
			remain []string
		}{fmt.Sprintf("more-%d", i), history.Settings{AutoDeleteMonths: 3}, map[string]time.Time{"a": month(1), "b": month(4)}, []string{"a"}})
	}
	auto := 0
	for _, u := range users {
		if u.s.AutoDeleteMonths > 0 {
			auto++
		}
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
	w.legacyDone(t)
	store := &countingStore{Store: w.store, calls: map[string]int{}}
	d := w.deps(store, func() time.Time { return clock })
	d.Every = 6 * time.Hour
	h := expirehistoryfn.New(d)

	// Four partitions, two at a time, pages of 2: one run makes every
	// pass.
	code, rep := post(t, h, `{"partitions":4,"parallel":2}`)
	if want := (expirehistoryfn.Report{Partitions: 4, Passes: 4, Users: auto, Entries: 5 + 12}); code != http.StatusOK || rep != want {
		t.Fatalf("first run: %d %+v, want %+v", code, rep, want)
	}
	calls := store.took()
	for _, u := range users {
		if diff := cmp.Diff(u.remain, w.list(t, u.id)); diff != "" {
			t.Errorf("%s's history after the pass (-want +got):\n%s", u.id, diff)
		}
		want := 0
		if u.s.AutoDeleteMonths > 0 {
			want = 1
		}
		if calls[u.id] != want {
			t.Errorf("%s expired %d times in the first pass, want %d", u.id, calls[u.id], want)
		}
	}
	// Every partition rests, and the walk is done for good.
	clock = now.Add(6*time.Hour - time.Second)
	if code, rep := post(t, h, `{"partitions":4,"parallel":2}`); code != http.StatusOK || rep != (expirehistoryfn.Report{Resting: 4}) {
		t.Errorf("run within Every: %d %+v; want every partition resting", code, rep)
	}
	if n := len(store.took()); n != 0 {
		t.Errorf("%d users swept while every partition rests", n)
	}
	// Then each partition sweeps its users again, once, nothing left to
	// remove.
	clock = now.Add(6 * time.Hour)
	if code, rep := post(t, h, `{"partitions":4,"parallel":4}`); code != http.StatusOK || rep != (expirehistoryfn.Report{Partitions: 4, Passes: 4, Users: auto}) {
		t.Errorf("run after Every: %d %+v; want every auto-deleting user once and nothing removed", code, rep)
	}
	for _, u := range users {
		want := 0
		if u.s.AutoDeleteMonths > 0 {
			want = 1
		}
		if got := store.calls[u.id]; got != want {
			t.Errorf("%s expired %d times in the second pass, want %d", u.id, got, want)
		}
	}
}

// Partitions are disjoint and cover every auto-deleting user: whatever the
// number of partitions, a pass of all of them takes each user once.
func TestExpireHistoryPartitionsCoverEveryUser(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	want := map[string]int{}
	for i := range 40 {
		u := fmt.Sprintf("user-%d", i)
		months := []int{0, 3, 18, 36}[i%4]
		if err := w.settings.Put(ctx, u, history.Settings{AutoDeleteMonths: months}); err != nil {
			t.Fatal(err)
		}
		if months > 0 {
			want[u] = 1
		}
	}
	w.legacyDone(t)
	for _, n := range []int{1, 3, 16} {
		store := &countingStore{Store: w.store, calls: map[string]int{}}
		d := w.deps(store, time.Now)
		d.Page = 3
		code, rep := post(t, expirehistoryfn.New(d), fmt.Sprintf(`{"partitions":%d,"parallel":%d}`, n, min(n, 4)))
		if code != http.StatusOK || rep.Passes != n || rep.Users != len(want) {
			t.Errorf("%d partitions: %d %+v; want %d passes of %d users", n, code, rep, n, len(want))
		}
		if diff := cmp.Diff(want, store.took()); diff != "" {
			t.Errorf("%d partitions: users swept (-want +got):\n%s", n, diff)
		}
	}
}

// Invocations that overlap share the partitions out: in a pass each user
// is swept once, whichever invocation took their partition.
func TestExpireHistoryOverlappingRuns(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	var ids []string
	for i := range 30 {
		u := fmt.Sprintf("user-%d", i)
		ids = append(ids, u)
		if err := w.settings.Put(ctx, u, history.Settings{AutoDeleteMonths: 3}); err != nil {
			t.Fatal(err)
		}
	}
	w.legacyDone(t)
	store := &countingStore{Store: w.store, calls: map[string]int{}}
	h := expirehistoryfn.New(w.deps(store, time.Now))
	var wg sync.WaitGroup
	reps := make([]expirehistoryfn.Report, 3)
	for i := range reps {
		wg.Go(func() {
			code, rep := post(t, h, `{"partitions":8,"parallel":2}`)
			if code != http.StatusOK {
				t.Errorf("run %d: status %d", i, code)
			}
			reps[i] = rep
		})
	}
	wg.Wait()
	passes := 0
	for _, r := range reps {
		passes += r.Passes
	}
	if passes != 8 {
		t.Errorf("passes of the three runs: %+v; want 8 in all", reps)
	}
	calls := store.took()
	for _, u := range ids {
		if calls[u] != 1 {
			t.Errorf("%s swept %d times by overlapping runs, want once", u, calls[u])
		}
	}
}

// A partition another invocation holds is left to it; the others are
// swept.
func TestExpireHistoryLeavesHeldPartition(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	w.legacyDone(t)
	if got, err := w.leases.Lease(ctx, expirehistoryfn.PartitionName(1, 2), "someone-else", time.Minute); err != nil || !got {
		t.Fatalf("lease: %v %v", got, err)
	}
	store := &countingStore{Store: w.store, calls: map[string]int{}}
	code, rep := post(t, expirehistoryfn.New(w.deps(store, time.Now)), `{"partitions":2,"parallel":2}`)
	if want := (expirehistoryfn.Report{Partitions: 1, Held: 1, Passes: 1}); code != http.StatusOK || rep != want {
		t.Errorf("run beside a held partition: %d %+v, want %+v", code, rep, want)
	}
	c, err := w.settings.Cursor(ctx, expirehistoryfn.PartitionName(1, 2))
	if err != nil || !c.PassStarted.IsZero() {
		t.Errorf("the held partition's cursor: %+v, %v; want untouched", c, err)
	}
}

// A run that fails resumes at the partition's last recorded page: the users
// of the pages before it are not taken again in the same pass, and every
// user's expired entries go in the end.
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
	w.legacyDone(t)
	// A partition walks its users in (part, document) order.
	slices.SortFunc(ids, func(a, b string) int {
		if c := historystore.ExpiryPart(a) - historystore.ExpiryPart(b); c != 0 {
			return c
		}
		return strings.Compare(historystore.DocID(a), historystore.DocID(b))
	})
	broken := true
	store := &countingStore{Store: w.store, calls: map[string]int{}, fail: func(u string) bool { return broken && u == ids[4] }}
	d := w.deps(store, func() time.Time { return now })
	d.Workers = 1
	h := expirehistoryfn.New(d)

	if code, _ := post(t, h, `{"partitions":1,"parallel":1}`); code != http.StatusServiceUnavailable {
		t.Fatalf("run with a failing backend: status %d, want 503", code)
	}
	// Pages [0 1] [2 3] done and recorded; [4 5] failed at its first user.
	broken = false
	code, rep := post(t, h, `{"partitions":1,"parallel":1}`)
	if code != http.StatusOK || rep.Passes != 1 || rep.Users != 5 || rep.Entries < 4 {
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

// Settings documents written before they held an expiry part are in no
// partition: the walk in document order stamps them and sweeps them once,
// starting over whatever cursor the job left before it was partitioned,
// and is then done; the partitions sweep them from then on.
func TestExpireHistoryStampsOldDocuments(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ids []string
	auto := map[string]bool{}
	for i := range 7 {
		id := fmt.Sprintf("old-%d", i)
		ids = append(ids, id)
		months := []int{3, 0, 18}[i%3]
		auto[id] = months > 0
		// The document as it was written before it held its part.
		if _, err := w.fs.Collection(historystore.SettingsCollection).Doc(historystore.DocID(id)).Set(ctx,
			map[string]any{"paused": false, "autoDeleteMonths": months, "updateTime": now}); err != nil {
			t.Fatal(err)
		}
		if err := w.store.Apply(ctx, history.NewWatch(id, "old", now.AddDate(0, -20, 0), 1)); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(historystore.DocID(a), historystore.DocID(b)) })
	// The unpartitioned job's cursor, in the middle of its walk.
	if _, err := w.fs.Collection(historystore.JobsCollection).Doc("expire-history").Set(ctx,
		map[string]any{"cursor": historystore.DocID(ids[3]), "updateTime": now}); err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: w.store, calls: map[string]int{}}
	clock := now
	h := expirehistoryfn.New(w.deps(store, func() time.Time { return clock }))
	// One piece at a time: the partitions sweep the documents the walk
	// stamped if they come after it.
	code, rep := post(t, h, `{"partitions":2,"parallel":1}`)
	if code != http.StatusOK || rep.Partitions != 3 || rep.Passes != 3 || rep.Stamped != 5 || rep.Entries != 5 || rep.Users < 5 {
		t.Fatalf("first run: %d %+v; want 3 passes, 5 documents stamped and their 5 entries removed", code, rep)
	}
	for _, id := range ids {
		if got := w.list(t, id); auto[id] == (len(got) != 0) {
			t.Errorf("%s (auto-delete %v) keeps %v", id, auto[id], got)
		}
	}
	// The walk is done for good; the partitions hold the stamped documents.
	clock = now.Add(expirehistoryfn.DefaultEvery)
	store.took()
	code, rep = post(t, h, `{"partitions":2,"parallel":3}`)
	if want := (expirehistoryfn.Report{Partitions: 2, Passes: 2, Users: 5}); code != http.StatusOK || rep != want {
		t.Errorf("next run: %d %+v, want %+v", code, rep, want)
	}
	if n := len(store.took()); n != 5 {
		t.Errorf("the partitions swept %d users, want the 5 stamped", n)
	}
}

func TestExpireHistoryBadRequest(t *testing.T) {
	t.Parallel()
	h := expirehistoryfn.New(expirehistoryfn.Deps{Users: failingUsers{}, Store: nil})
	for body, reason := range map[string]errs.Reason{
		`{"partitions":0}`: errs.InvalidValue, `{"partitions":-1}`: errs.InvalidValue, `{"partitions":4097}`: errs.InvalidValue,
		`{"partitions":4,"parallel":0}`: errs.InvalidValue, `{"parallel":257}`: errs.InvalidValue,
		`{"partitions":"x"}`: errs.WrongFieldType, `{"users":1}`: errs.UnknownField, `{"partitions":1,"x":1}`: errs.UnknownField, `[`: errs.InvalidJSON,
	} {
		rec := httptest.NewRecorder()
		httpx.Standard("ExpireHistory", "p", nil, time.Minute)(h).ServeHTTP(rec, httptest.NewRequest("POST", "/internal/expire-history", strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest || apitest.ReasonOf(rec.Body.Bytes()) != reason {
			t.Errorf("body %s: %d %s, want 400 %s", body, rec.Code, rec.Body, reason)
		}
	}
	if code, _ := post(t, h, `{"partitions":10}`); code != http.StatusServiceUnavailable {
		t.Errorf("settings backend down: status %d, want 503", code)
	}
}

// failingUsers is a settings backend that is down.
type failingUsers struct{ expirehistoryfn.Users }

var errDown = fmt.Errorf("%w: down", errs.ErrBackendUnavailable)

func (failingUsers) Cursors(context.Context, []string) ([]historystore.JobCursor, error) {
	return nil, errDown
}
