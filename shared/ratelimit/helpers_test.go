package ratelimit

import (
	"context"
	"testing"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/shared/emulators/emulatortest"
	"github.com/videngage/engagement/shared/platform"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// newClient is a Bigtable client of fresh tables of the emulator.
func newClient(t testing.TB) *bigtable.Client {
	t.Helper()
	c, err := platform.New(context.Background(), emulatortest.New(t), platform.NeedBigtable)
	if err != nil {
		t.Fatalf("platform.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.Bigtable
}
