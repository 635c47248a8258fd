package counterstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// tableLeases holds the leases of the background jobs (045_jobs.sql).
const tableLeases = "JobLeases"

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
		row, err := tx.ReadRow(ctx, tableLeases, spanner.Key{name}, []string{"Holder", "Expires"})
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
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate(tableLeases,
			[]string{"Name", "Holder", "Expires"}, []any{name, holder, now.Add(ttl)})})
	})
	if err != nil {
		return false, fmt.Errorf("counterstore.Lease(%s): %w", name, err)
	}
	return got, nil
}

// Release ends holder's lease on name (if it still holds it).
func (s *Store) Release(ctx context.Context, name, holder string) error {
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.ReadRow(ctx, tableLeases, spanner.Key{name}, []string{"Holder"})
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
		return tx.BufferWrite([]*spanner.Mutation{spanner.Delete(tableLeases, spanner.Key{name})})
	})
	if err != nil {
		return fmt.Errorf("counterstore.Release(%s): %w", name, err)
	}
	return nil
}
