package spannerdb_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// InTx returns by its context's deadline even while the transaction does
// not end (here a step that does not heed the context, as the Spanner
// client's rollback under a context of its own), answers backend
// unavailable, and the next transaction runs once that one has ended.
func TestInTxReturnsByItsDeadline(t *testing.T) {
	db := emulatortest.Spanner(t, emulatortest.New(t))
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	const deadline, blocked = 200 * time.Millisecond, 10 * time.Second
	time.AfterFunc(blocked, unblock)

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		<-release
		return ctx.Err()
	})
	took := time.Since(start)
	unblock()
	if !errors.Is(err, spannerdb.ErrUnavailable) {
		t.Errorf("error %v, want spannerdb.ErrUnavailable", err)
	}
	if took > blocked/2 {
		t.Errorf("InTx returned after %v with a deadline of %v", took, deadline)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if _, err := db.InTx(ctx2, func(context.Context, *spanner.ReadWriteTransaction) error { return nil }); err != nil {
		t.Errorf("the next transaction: %v", err)
	}
}

// A panic in a transaction's function is raised in InTx's caller.
func TestInTxPanicsInTheCaller(t *testing.T) {
	db := emulatortest.Spanner(t, emulatortest.New(t))
	defer func() {
		if p := recover(); p != "boom" {
			t.Errorf("recovered %v, want the function's panic", p)
		}
	}()
	db.InTx(context.Background(), func(context.Context, *spanner.ReadWriteTransaction) error { panic("boom") })
	t.Error("InTx returned")
}
