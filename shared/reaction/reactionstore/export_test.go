package reactionstore

import "time"

// SetNow replaces the store's clock (the writer's time, not Spanner's
// commit timestamps); it returns s.
func (s *Store) SetNow(now func() time.Time) *Store {
	s.now = now
	return s
}

// SetBackfillBatch bounds the rows one backfill transaction moves, for a
// test; it returns the restore.
func SetBackfillBatch(n int) (restore func()) {
	old := backfillBatch
	backfillBatch = n
	return func() { backfillBatch = old }
}
