package historystore

import (
	"errors"
	"strings"
	"testing"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
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
	if err := s.SetCursor(t.Context(), "job", "x"); !errors.Is(err, errs.ErrBackendUnavailable) {
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
	if got, err := s.Cursor(ctx, "job"); err != nil || got != "" {
		t.Fatalf("Cursor of a job that never ran = %q, %v", got, err)
	}
	for _, c := range []string{"uYWJj", ""} {
		if err := s.SetCursor(ctx, "job", c); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Cursor(ctx, "job"); err != nil || got != c {
			t.Errorf("Cursor after SetCursor(%q) = %q, %v", c, got, err)
		}
	}
	if got, err := s.Cursor(ctx, "other"); err != nil || got != "" {
		t.Errorf("another job's cursor = %q, %v", got, err)
	}
}
