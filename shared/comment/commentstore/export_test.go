package commentstore

import "time"

// SetClock makes s read the time from now.
func (s *Store) SetClock(now func() time.Time) { s.now = now }
