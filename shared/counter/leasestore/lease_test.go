package leasestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter/leasestore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// TestLease: one holder at a time until the lease expires or is released.
func TestLease(t *testing.T) {
	ctx := context.Background()
	leases := leasestore.New(emulatortest.Spanner(t, emulatortest.New(t)), nil)
	a, b := leasestore.NewHolder(), leasestore.NewHolder()
	lease := func(h string, ttl time.Duration) bool {
		t.Helper()
		ok, err := leases.Lease(ctx, "job/1", h, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !lease(a, time.Minute) || lease(b, time.Minute) || !lease(a, time.Minute) {
		t.Fatal("a free lease went to the first holder only, and it renews")
	}
	if err := leases.Release(ctx, "job/1", b); err != nil {
		t.Fatal(err)
	}
	if lease(b, time.Minute) {
		t.Fatal("another holder released a's lease")
	}
	if err := leases.Release(ctx, "job/1", a); err != nil {
		t.Fatal(err)
	}
	if !lease(b, -time.Second) {
		t.Fatal("a released lease is free")
	}
	// b's lease has expired already: a takes it.
	if !lease(a, time.Minute) {
		t.Fatal("an expired lease is free")
	}
}
