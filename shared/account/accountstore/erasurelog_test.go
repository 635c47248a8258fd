package accountstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/errs"
)

// memObjects is a bucket in memory that counts its reads.
type memObjects struct {
	mu      sync.Mutex
	objects map[string][]byte
	reads   int
	fail    error
}

func (m *memObjects) Put(_ context.Context, name string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if _, ok := m.objects[name]; ok {
		return errors.New("object exists")
	}
	m.objects[name] = slices.Clone(data)
	return nil
}

func (m *memObjects) List(_ context.Context, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for n := range m.objects {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (m *memObjects) Read(_ context.Context, name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	b, ok := m.objects[name]
	if !ok {
		return nil, errors.New("no such object")
	}
	return b, nil
}

// TestErasureLog: every append is an object of its own, also two of one
// user at one instant; Since returns the entries from a time on, oldest
// first, reading only the objects of those; the whole log without a time;
// a bucket down is a 503.
func TestErasureLog(t *testing.T) {
	ctx := context.Background()
	objects := &memObjects{objects: map[string][]byte{}}
	log := NewErasureLog(objects)
	now := time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)
	log.now = func() time.Time { return now }
	appends := []account.LogEntry{
		{UserID: "old", RequestTime: now.Add(-20 * 24 * time.Hour)},
		{UserID: "ann", RequestTime: now.Add(-25 * time.Hour)},
		{UserID: "bob", RequestTime: now.Add(-2 * time.Hour)},
		{UserID: "bob", RequestTime: now.Add(-2 * time.Hour)},
		{UserID: "cy", RequestTime: now.Add(-time.Hour)},
		{UserID: "ahead", RequestTime: now.Add(time.Minute)},
		{UserID: "dee", RequestTime: now.Add(-26 * time.Hour)},
	}
	for _, e := range appends {
		if err := log.Append(ctx, e.UserID, e.RequestTime); err != nil {
			t.Fatal(err)
		}
	}
	if len(objects.objects) != len(appends) {
		t.Fatalf("%d objects for %d appends", len(objects.objects), len(appends))
	}
	for name := range objects.objects {
		for _, e := range appends {
			if strings.Contains(name, e.UserID) {
				t.Errorf("object %s names user %s", name, e.UserID)
			}
		}
	}
	users := func(es []account.LogEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.UserID)
		}
		return out
	}

	got, err := log.Since(ctx, now.Add(-25*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ann", "bob", "bob", "cy", "ahead"}; !slices.Equal(users(got), want) {
		t.Errorf("since 25 h ago: %q, want %q", users(got), want)
	}
	if objects.reads != 5 {
		t.Errorf("read %d objects for 5 entries", objects.reads)
	}
	if !got[0].RequestTime.Equal(now.Add(-25 * time.Hour)) {
		t.Errorf("first entry %+v", got[0])
	}

	got, err = log.Since(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old", "dee", "ann", "bob", "bob", "cy", "ahead"}; !slices.Equal(users(got), want) {
		t.Errorf("the whole log: %q, want %q", users(got), want)
	}

	objects.fail = errors.New("bucket down")
	if err := log.Append(ctx, "eve", now); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("append with the bucket down: %v", err)
	}
}
