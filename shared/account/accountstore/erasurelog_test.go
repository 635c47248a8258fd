package accountstore

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/objects"
)

// countedBucket is a bucket of the Cloud Storage emulator that counts its
// reads.
type countedBucket struct {
	*objects.Bucket
	reads atomic.Int64
}

func (b *countedBucket) Read(ctx context.Context, name string) (io.ReadCloser, error) {
	b.reads.Add(1)
	return b.Bucket.Read(ctx, name)
}

func newLogBucket(t *testing.T) (*objects.Client, *countedBucket) {
	t.Helper()
	cfg := emulatortest.New(t)
	c, err := objects.New(context.Background(), cfg.Objects)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, &countedBucket{Bucket: c.Bucket(cfg.Erasure.LogBucket)}
}

// TestErasureLog, on the Cloud Storage emulator: every append is an object
// of its own, also two of one user at one instant, and no name holds a user
// id; Since returns the entries from a time on, oldest first, reading only
// the objects of those; the whole log without a time; an append that fails
// is a 503.
func TestErasureLog(t *testing.T) {
	ctx := context.Background()
	client, bucket := newLogBucket(t)
	log := NewErasureLog(bucket)
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
	stored, err := bucket.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(appends) {
		t.Fatalf("%d objects for %d appends", len(stored), len(appends))
	}
	for _, o := range stored {
		for _, e := range appends {
			if strings.Contains(o.Name, e.UserID) {
				t.Errorf("object %s names user %s", o.Name, e.UserID)
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
	if n := bucket.reads.Load(); n != 5 {
		t.Errorf("read %d objects for 5 entries", n)
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

	gone := NewErasureLog(client.Bucket("no-such-erasure-log"))
	if err := gone.Append(ctx, "eve", now); !errors.Is(err, errs.ErrBackendUnavailable) {
		t.Errorf("append to a bucket that does not answer: %v", err)
	}
}
