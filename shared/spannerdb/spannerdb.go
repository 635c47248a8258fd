// Package spannerdb is the thin Spanner layer every store shares: the client
// built from config, InTx for read-write transactions, the sentinel errors
// and the mapping of Spanner's transient failures to "backend unavailable".
package spannerdb

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
)

// Sentinel errors of the stores built on this package.
var (
	// ErrNotFound: the row the operation needs does not exist.
	ErrNotFound = errors.New("spannerdb: not found")
	// ErrUnavailable: Spanner did not answer or gave up; a retry may succeed.
	// It wraps errs.ErrBackendUnavailable, so handlers answer 503.
	ErrUnavailable = fmt.Errorf("spannerdb: %w", errs.ErrBackendUnavailable)
)

// DB is a Spanner client plus the transaction discipline of this system.
type DB struct {
	Client *spanner.Client
	// serial is set against the emulator, which runs one read-write
	// transaction at a time and fails (rather than queues) overlapping ones.
	serial bool
	// lockPath and lockAt are the file and byte whose lock serialises the
	// database's transactions across processes (against the emulator).
	lockPath string
	lockAt   int64
}

// emulatorTx serialises read-write transactions process-wide against the
// emulator. It is process-wide, not per client, because the local stack runs
// every function (each with its own client) in one process, and the emulator
// refuses overlapping transactions whatever client they come from.
var emulatorTx = make(chan struct{}, 1)

// New builds the client for cfg's database. Against the emulator
// (SPANNER_EMULATOR_HOST set) read-write transactions are serialised.
func New(ctx context.Context, cfg *config.Config) (*DB, error) {
	c, err := spanner.NewClientWithConfig(ctx, cfg.DatabasePath(), spanner.ClientConfig{
		DisableNativeMetrics: cfg.Spanner.EmulatorHost != "",
		DatabaseRole:         cfg.Spanner.DatabaseRole,
	}, ClientOptions()...)
	if err != nil {
		return nil, fmt.Errorf("spannerdb.New: %w", err)
	}
	return Wrap(c, cfg), nil
}

// Wrap uses an existing client (host.Clients builds one per instance).
func Wrap(c *spanner.Client, cfg *config.Config) *DB {
	db := &DB{Client: c, serial: cfg.Spanner.EmulatorHost != ""}
	if db.serial {
		db.lockPath, db.lockAt = emulatorLock(cfg.Spanner.EmulatorHost, cfg.DatabasePath())
	}
	return db
}

// Serial reports whether read-write transactions run one at a time.
func (db *DB) Serial() bool { return db.serial }

// InTx runs fn in a read-write transaction and returns the commit timestamp.
// fn may run more than once (Spanner retries aborted transactions), so it must
// not have effects outside the transaction. Errors are wrapped with ErrUnavailable
// when Spanner is unavailable or the deadline passed.
//
// InTx returns by ctx's deadline even when the client does not: after a
// failed transaction body the Spanner client rolls back under a context of
// its own, without a deadline, so an unresponsive Spanner would hold the
// caller until it answers. The transaction then ends on its own (and lets
// the next one start, against the emulator) while the caller gets the
// deadline's error, as for a commit whose outcome is unknown. A panic of
// fn is raised again in the caller (lost if the caller has left by then).
func (db *DB) InTx(ctx context.Context, fn func(context.Context, *spanner.ReadWriteTransaction) error) (time.Time, error) {
	release, err := db.serialise(ctx, "InTx")
	if err != nil {
		return time.Time{}, err
	}
	type result struct {
		ts       time.Time
		err      error
		panicked any // fn's panic, raised again in the caller
	}
	done := make(chan result, 1)
	go func() {
		defer release()
		defer func() {
			if p := recover(); p != nil {
				done <- result{panicked: p}
			}
		}()
		ts, err := db.Client.ReadWriteTransaction(ctx, fn)
		for try := 1; db.serial && try < emulatorRetries && emulatorDropped(err) && ctx.Err() == nil; try++ {
			ts, err = db.Client.ReadWriteTransaction(ctx, fn)
		}
		done <- result{ts: ts, err: err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done:
		default:
			return time.Time{}, fmt.Errorf("spannerdb.InTx: %w", errors.Join(ErrUnavailable, ctx.Err()))
		}
	}
	if r.panicked != nil {
		panic(r.panicked)
	}
	if r.err != nil {
		return time.Time{}, Map(r.err)
	}
	return r.ts, nil
}

// emulatorRetries bounds the runs of one InTx against the emulator when the
// emulator drops its transaction (emulatorDropped).
const emulatorRetries = 5

// emulatorDropped reports the emulator's answer for a read-write transaction
// it dropped to serve another (a client of another process, which InTx's
// serialisation does not reach): FailedPrecondition "Invalid transaction
// ID" or NotFound "Transaction not found", where Spanner answers Aborted,
// which the client retries itself. The transaction did not commit, so
// running it again is what an abort gets.
func emulatorDropped(err error) bool {
	switch spanner.ErrCode(err) {
	case codes.FailedPrecondition:
		return strings.Contains(spanner.ErrDesc(err), "Invalid transaction ID")
	case codes.NotFound:
		return strings.Contains(spanner.ErrDesc(err), "Transaction not found")
	}
	return false
}

// Single is a strong single-use read-only transaction, counted as one read.
func (db *DB) Single() *spanner.ReadOnlyTransaction {
	return db.Client.Single()
}

// Stale is a single-use read-only transaction that may be up to maxStaleness
// old (served by the nearest replica without waiting for the leader); zero
// means a strong read. Counted as one read.
func (db *DB) Stale(maxStaleness time.Duration) *spanner.ReadOnlyTransaction {
	if maxStaleness <= 0 {
		return db.Client.Single()
	}
	return db.Client.Single().WithTimestampBound(spanner.MaxStaleness(maxStaleness))
}

// At is a single-use read-only transaction at exactly ts, counted as one
// read: reads that must see what an earlier strong read saw, and nothing
// later, each in its own request.
func (db *DB) At(ts time.Time) *spanner.ReadOnlyTransaction {
	return db.Client.Single().WithTimestampBound(spanner.ReadTimestamp(ts))
}

// InSnapshot runs fn in a strong multi-use read-only transaction: every read
// through it sees the same timestamp. Against the emulator it is serialised
// with the read-write transactions, which the emulator does not run beside a
// multi-use read-only one; fn must not start a read-write transaction. fn
// runs again when the emulator dropped the transaction (emulatorDropped),
// so it must not have effects outside it.
func (db *DB) InSnapshot(ctx context.Context, fn func(context.Context, *spanner.ReadOnlyTransaction) error) error {
	release, err := db.serialise(ctx, "InSnapshot")
	if err != nil {
		return err
	}
	defer release()
	run := func() error {
		tx := db.Client.ReadOnlyTransaction()
		defer tx.Close()
		return fn(ctx, tx)
	}
	err = run()
	for try := 1; db.serial && try < emulatorRetries && emulatorDropped(err) && ctx.Err() == nil; try++ {
		err = run()
	}
	return Map(err)
}

// serialise waits for the emulator's one transaction at a time (against
// the emulator only) and returns what ends the caller's turn; op names the
// caller in the error of a wait cut short by ctx. The turn is the process's
// (emulatorTx) and then the database's across processes (a file lock): the
// drills and the soak run the event functions in processes of their own,
// and without it the emulator's one-at-a-time policy lets two processes
// abort each other's transactions over and over.
func (db *DB) serialise(ctx context.Context, op string) (release func(), err error) {
	if !db.serial {
		return func() {}, nil
	}
	select {
	case emulatorTx <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("spannerdb.%s: waiting for the emulator: %w", op, errors.Join(ErrUnavailable, ctx.Err()))
	}
	unlock, err := lockRange(ctx, db.lockPath, db.lockAt)
	if err != nil {
		<-emulatorTx
		return nil, fmt.Errorf("spannerdb.%s: waiting for the emulator: %w", op, errors.Join(ErrUnavailable, err))
	}
	return func() {
		unlock()
		<-emulatorTx
	}, nil
}

// emulatorLock is the lock of an emulator's database, shared by every
// process on this machine that uses it: a byte, by the database's hash, of
// one file per emulator (two databases on one byte only wait for each
// other).
func emulatorLock(host, database string) (path string, offset int64) {
	sum := sha256.Sum256([]byte(database))
	name := "engagement-spanner-" + strings.NewReplacer(":", "_", "/", "_").Replace(host) + ".lock"
	return filepath.Join(os.TempDir(), name), int64(binary.BigEndian.Uint32(sum[:4]) % (1 << 20))
}

// Map wraps transient errors (errs.Transient) with ErrUnavailable; other errors are
// returned as they are (an error the caller's fn returned keeps its identity).
func Map(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !errs.Transient(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
