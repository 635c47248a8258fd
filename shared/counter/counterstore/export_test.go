package counterstore

import "time"

// SetNow sets the store's clock (the hours of the hourly runs).
func (s *Store) SetNow(now func() time.Time) { s.now = now }
