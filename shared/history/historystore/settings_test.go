package historystore

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
)

// newFirestore is a Firestore client of a fresh project of the emulator.
func newFirestore(t *testing.T) *firestore.Client {
	t.Helper()
	return emulatortest.Firestore(t, emulatortest.New(t))
}

var trickyUserIDs = []string{"alice", "a/b", "a", "a#b", "__x__", "__.*__", ".", "..", "日本", "\x00", strings.Repeat("x", 128)}

func TestDocID(t *testing.T) {
	seen := map[string]string{}
	for _, u := range trickyUserIDs {
		id := DocID(u)
		// Firestore document ids: no '/', not "." or "..", not __.*__,
		// at most 1,500 bytes.
		if strings.Contains(id, "/") || id == "." || id == ".." || (strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__")) || len(id) > 1500 || id == "" {
			t.Errorf("DocID(%q) = %q is not a valid document id", u, id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("DocID(%q) = DocID(%q) = %q", u, prev, id)
		}
		seen[id] = u
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	s := NewSettings(newFirestore(t))
	ctx := t.Context()

	for _, u := range trickyUserIDs {
		got, err := s.Get(ctx, u)
		if err != nil {
			t.Fatalf("Get(%q): %v", u, err)
		}
		if diff := cmp.Diff(history.Settings{}, got); diff != "" {
			t.Errorf("Get(%q) of a user who never set any (-want +got):\n%s", u, diff)
		}
	}

	// Every user gets its own settings, and Put replaces them.
	for i, u := range trickyUserIDs {
		v := history.Settings{Paused: i%2 == 0, AutoDeleteMonths: []int{0, 3, 18, 36}[i%4]}
		if err := s.Put(ctx, u, v); err != nil {
			t.Fatalf("Put(%q): %v", u, err)
		}
	}
	for i, u := range trickyUserIDs {
		want := history.Settings{Paused: i%2 == 0, AutoDeleteMonths: []int{0, 3, 18, 36}[i%4]}
		got, err := s.Get(ctx, u)
		if err != nil {
			t.Fatalf("Get(%q): %v", u, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get(%q) after Put (-want +got):\n%s", u, diff)
		}
	}
	if err := s.Put(ctx, "alice", history.Settings{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "alice"); err != nil || got != (history.Settings{}) {
		t.Errorf("Get after Put of the defaults = %+v, %v", got, err)
	}
}

func TestSettingsBackendDown(t *testing.T) {
	t.Parallel()
	c := newFirestore(t)
	s := NewSettings(c)
	c.Close()
	if _, err := s.Get(t.Context(), "alice"); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("Get on a closed client: %v; want ErrBackendUnavailable", err)
	}
	if err := s.Put(t.Context(), "alice", history.Settings{Paused: true}); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("Put on a closed client: %v; want ErrBackendUnavailable", err)
	}
	if _, _, err := s.AutoDeleting(t.Context(), "", 10); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("AutoDeleting on a closed client: %v; want ErrBackendUnavailable", err)
	}
	if _, err := s.Cursor(t.Context(), "job"); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("Cursor on a closed client: %v; want ErrBackendUnavailable", err)
	}
	if err := s.SetCursor(t.Context(), "job", JobCursor{Cursor: "x"}); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("SetCursor on a closed client: %v; want ErrBackendUnavailable", err)
	}
}

// AutoDeleting lists exactly the users whose auto-delete is on, each once,
// in pages that resume after their cursor, and says when the list is done.
func TestAutoDeleting(t *testing.T) {
	t.Parallel()
	s := NewSettings(newFirestore(t))
	ctx := t.Context()
	want := map[string]history.Settings{}
	for i, u := range trickyUserIDs {
		v := history.Settings{Paused: i%3 == 0, AutoDeleteMonths: []int{0, 3, 18, 36}[i%4]}
		if err := s.Put(ctx, u, v); err != nil {
			t.Fatal(err)
		}
		if v.AutoDeleteMonths > 0 {
			want[u] = v
		}
	}
	for _, limit := range []int{1, 2, 3, len(want), len(want) + 1, 100} {
		got := map[string]history.Settings{}
		cursor := ""
		for pages := 1; ; pages++ {
			if pages > len(want)+2 {
				t.Fatalf("limit %d: the list never ends", limit)
			}
			users, next, err := s.AutoDeleting(ctx, cursor, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(users) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(users))
			}
			for _, u := range users {
				if _, dup := got[u.UserID]; dup {
					t.Errorf("limit %d: %q listed twice", limit, u.UserID)
				}
				got[u.UserID] = u.Settings
			}
			if next == "" {
				break
			}
			if next <= cursor {
				t.Fatalf("limit %d: cursor %q does not move past %q", limit, next, cursor)
			}
			cursor = next
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("limit %d (-want +got):\n%s", limit, diff)
		}
	}
}

func TestCursor(t *testing.T) {
	t.Parallel()
	s := NewSettings(newFirestore(t))
	ctx := t.Context()
	if got, err := s.Cursor(ctx, "job"); err != nil || got != (JobCursor{}) {
		t.Fatalf("Cursor of a job that never ran = %+v, %v", got, err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	for _, c := range []JobCursor{{Cursor: "uYWJj", PassStarted: at}, {PassStarted: at, PassEnded: at.Add(time.Second)}} {
		if err := s.SetCursor(ctx, "job", c); err != nil {
			t.Fatal(err)
		}
		got, err := s.Cursor(ctx, "job")
		if got.UpdateTime.IsZero() {
			t.Errorf("Cursor after SetCursor(%+v): no update time", c)
		}
		got.UpdateTime = time.Time{}
		if err != nil || !got.PassStarted.Equal(c.PassStarted) || !got.PassEnded.Equal(c.PassEnded) || got.Cursor != c.Cursor {
			t.Errorf("Cursor after SetCursor(%+v) = %+v, %v", c, got, err)
		}
	}
	if got, err := s.Cursor(ctx, "other"); err != nil || got != (JobCursor{}) {
		t.Errorf("another job's cursor = %+v, %v", got, err)
	}
	all, err := s.Cursors(ctx, []string{"other", "job"})
	if err != nil || len(all) != 2 || all[0] != (JobCursor{}) || all[1].Cursor != "" || all[1].PassEnded.IsZero() {
		t.Errorf("Cursors = %+v, %v", all, err)
	}
}

// AutoDeletingIn lists exactly the users of the parts [lo, hi) whose
// auto-delete is on, each once, in pages that resume after their cursor;
// ranges that cut the parts apart list every such user once between them.
func TestAutoDeletingIn(t *testing.T) {
	t.Parallel()
	s := NewSettings(newFirestore(t))
	ctx := t.Context()
	want := map[string]bool{}
	for i, u := range append(slices.Clone(trickyUserIDs), "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8") {
		v := history.Settings{AutoDeleteMonths: []int{0, 3, 18, 36}[i%4]}
		if err := s.Put(ctx, u, v); err != nil {
			t.Fatal(err)
		}
		if v.AutoDeleteMonths > 0 {
			want[u] = true
		}
	}
	// Turned off again: out of every partition.
	if err := s.Put(ctx, "off-again", history.Settings{AutoDeleteMonths: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "off-again", history.Settings{}); err != nil {
		t.Fatal(err)
	}
	for _, cuts := range [][]int{{0, counter.Parts}, {0, 1000, 2048, 2049, 4000, counter.Parts}} {
		for _, limit := range []int{1, 3, 100} {
			got := map[string]bool{}
			for i := range len(cuts) - 1 {
				lo, hi := cuts[i], cuts[i+1]
				cursor := ""
				for pages := 1; ; pages++ {
					if pages > len(want)+2 {
						t.Fatalf("limit %d: the list never ends", limit)
					}
					users, next, err := s.AutoDeletingIn(ctx, lo, hi, cursor, limit)
					if err != nil {
						t.Fatal(err)
					}
					if len(users) > limit {
						t.Fatalf("limit %d: a page of %d", limit, len(users))
					}
					for _, u := range users {
						if p := ExpiryPart(u.UserID); p < lo || p >= hi || got[u.UserID] || !u.Stamped {
							t.Errorf("parts [%d, %d) limit %d: %q (part %d, stamped %v) listed again or out of range", lo, hi, limit, u.UserID, p, u.Stamped)
						}
						got[u.UserID] = true
					}
					if next == "" {
						break
					}
					cursor = next
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("cuts %v limit %d (-want +got):\n%s", cuts, limit, diff)
			}
		}
	}
	if _, _, err := s.AutoDeletingIn(ctx, 0, 10, "no-slash", 1); err == nil {
		t.Error("a malformed cursor was accepted")
	}
}

// StampExpiryPart gives a document written before documents held their part
// its part, once; it leaves documents of users who keep everything, and
// documents that have a part.
func TestStampExpiryPart(t *testing.T) {
	t.Parallel()
	c := newFirestore(t)
	s := NewSettings(c)
	ctx := t.Context()
	for u, months := range map[string]int{"old-auto": 18, "old-keep": 0} {
		if _, err := c.Collection(SettingsCollection).Doc(DocID(u)).Set(ctx, map[string]any{"paused": true, "autoDeleteMonths": months}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, "new-auto", history.Settings{AutoDeleteMonths: 3}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user  string
		wrote bool
	}{{"old-auto", true}, {"old-auto", false}, {"old-keep", false}, {"new-auto", false}, {"nobody", false}} {
		if wrote, err := s.StampExpiryPart(ctx, tc.user); err != nil || wrote != tc.wrote {
			t.Errorf("StampExpiryPart(%s) = %v, %v; want %v", tc.user, wrote, err, tc.wrote)
		}
	}
	users, _, err := s.AutoDeletingIn(ctx, 0, counter.Parts, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range users {
		got = append(got, u.UserID)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"new-auto", "old-auto"}, got); diff != "" {
		t.Errorf("users with a part (-want +got):\n%s", diff)
	}
	if v, err := s.Get(ctx, "old-auto"); err != nil || v != (history.Settings{Paused: true, AutoDeleteMonths: 18}) {
		t.Errorf("old-auto's settings after the stamp: %+v, %v", v, err)
	}
	if _, err := c.Collection(SettingsCollection).Doc(DocID("nobody")).Get(ctx); status.Code(err) != codes.NotFound {
		t.Errorf("a stamp created a document: %v", err)
	}
}
