package ratelimit

import (
	"testing"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// newClient is a Bigtable client of fresh tables of the emulator.
func newClient(t testing.TB) *bigtable.Client {
	t.Helper()
	return emulatortest.Bigtable(t, emulatortest.New(t))
}
