package moderationstore

import "time"

// SetNow replaces the store's clock (the detectors' and the gate's time,
// not Spanner's commit timestamps); it returns s.
func (s *Store) SetNow(now func() time.Time) *Store {
	s.now = now
	return s
}
