package emulatortest

import (
	"testing"

	"github.com/videngage/engagement/shared/objects"
)

// ExportsBucket is the exports bucket of a new world (New) on the Cloud
// Storage emulator, through a client closed when the test ends.
func ExportsBucket(t testing.TB) *objects.Bucket {
	t.Helper()
	cfg := New(t)
	c, err := objects.New(t.Context(), cfg.Objects)
	if err != nil {
		t.Fatalf("emulatortest.ExportsBucket: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.Bucket(cfg.Objects.ExportsBucket)
}
