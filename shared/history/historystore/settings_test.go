package historystore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/emulators/emulatortest"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/platform"
)

// newFirestore is a Firestore client of a fresh project of the emulator.
func newFirestore(t *testing.T) *firestore.Client {
	t.Helper()
	c, err := platform.New(context.Background(), emulatortest.New(t), platform.NeedFirestore)
	if err != nil {
		t.Fatalf("platform.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.Firestore
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
}
