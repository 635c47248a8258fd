// Package leasestore keeps the leases of the counters' scheduled jobs in
// Spanner (JobLeases): a rollup partition, a reconciliation slice.
package leasestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/spannerdb"
)

// table holds the leases of the background jobs (045_jobs.sql).
const table = "JobLeases"

// Store is the leases' Spanner store.
type Store struct {
	db  *spannerdb.DB
	now func() time.Time
}

// New returns the store over db, on the clock now (nil: time.Now): the
// one its callers use for the expiry times they write.
func New(db *spannerdb.DB, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now}
}

// NewHolder names one holder of leases (one invocation of a job).
func NewHolder() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on supported platforms
	return hex.EncodeToString(b[:])
}

// Lease takes or renews the lease name for holder until now+ttl. It fails
// (false) while another holder's lease has not expired. Leases keep two
// invocations of a job off the same piece of work at once; correctness never
// rests on them alone (the work itself is transactional), so clock skew
// between instances costs at most some duplicated effort.
func (s *Store) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	got := false
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		got = false
		now := s.now()
		row, err := tx.ReadRow(ctx, table, spanner.Key{name}, []string{"Holder", "Expires"})
		switch {
		case spanner.ErrCode(err) == 5: // NotFound: free
		case err != nil:
			return err
		default:
			var h string
			var exp time.Time
			if err := row.Columns(&h, &exp); err != nil {
				return err
			}
			if h != holder && exp.After(now) {
				return nil
			}
		}
		got = true
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate(table,
			[]string{"Name", "Holder", "Expires"}, []any{name, holder, now.Add(ttl)})})
	})
	if err != nil {
		return false, fmt.Errorf("leasestore.Lease(%s): %w", name, err)
	}
	return got, nil
}

// Release ends holder's lease on name (if it still holds it).
func (s *Store) Release(ctx context.Context, name, holder string) error {
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.ReadRow(ctx, table, spanner.Key{name}, []string{"Holder"})
		if spanner.ErrCode(err) == 5 {
			return nil
		}
		if err != nil {
			return err
		}
		var h string
		if err := row.Columns(&h); err != nil {
			return err
		}
		if h != holder {
			return nil
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.Delete(table, spanner.Key{name})})
	})
	if err != nil {
		return fmt.Errorf("leasestore.Release(%s): %w", name, err)
	}
	return nil
}

// Holder reads, in tx, who holds the lease name ("" for nobody), expired or
// not: a job checks it still holds its lease in the transaction that
// commits its work.
func Holder(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (string, error) {
	row, err := tx.ReadRow(ctx, table, spanner.Key{name}, []string{"Holder"})
	if spanner.ErrCode(err) == 5 { // NotFound
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var h string
	err = row.Columns(&h)
	return h, err
}

// Renew returns the mutation that gives the lease name to holder until
// expires, for the transaction that found holder holding it.
func Renew(name, holder string, expires time.Time) *spanner.Mutation {
	return spanner.InsertOrUpdate(table, []string{"Name", "Holder", "Expires"}, []any{name, holder, expires})
}
