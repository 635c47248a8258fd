package outboxstore_test

import (
	"testing"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }
