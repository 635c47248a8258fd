package account

import (
	"slices"
	"time"
)

// ExportDay is the span over which ExportLimit counts a user's exports.
const ExportDay = 24 * time.Hour

// Exports is what is kept about one user's recent exports: the start times
// of those of the last ExportDay, oldest first, and the running one.
type Exports struct {
	Starts []time.Time
	// Lease names the running export ("" when none), and RunningUntil is
	// when it is over whatever happens to it: its start plus the export's
	// deadline, so that a lost instance cannot hold the user's next export
	// for longer.
	Lease        string
	RunningUntil time.Time
}

// ExportLimit admits a user's exports: one at a time, and at most PerDay in
// any ExportDay (0: no limit on either). An export reads everything held
// about the user for up to its deadline; the limit bounds what one account
// can make the service read.
type ExportLimit struct{ PerDay int }

// Begin decides an export started at now that may run until deadline under
// lease. Admitted, it returns the state to store; refused, how long to wait
// and whether the refusal is for one already running.
func (l ExportLimit) Begin(s Exports, now, deadline time.Time, lease string) (next Exports, running bool, wait time.Duration) {
	if l.PerDay <= 0 {
		return s, false, 0
	}
	var recent []time.Time
	for _, t := range s.Starts {
		if t.Add(ExportDay).After(now) {
			recent = append(recent, t)
		}
	}
	slices.SortFunc(recent, func(a, b time.Time) int { return a.Compare(b) })
	if s.Lease != "" && s.RunningUntil.After(now) {
		return s, true, s.RunningUntil.Sub(now)
	}
	if len(recent) >= l.PerDay {
		return s, false, recent[len(recent)-l.PerDay].Add(ExportDay).Sub(now)
	}
	return Exports{Starts: append(recent, now), Lease: lease, RunningUntil: deadline}, false, 0
}

// End marks the export of lease over; another's lease is left as it is.
func (s Exports) End(lease string) Exports {
	if s.Lease == lease {
		s.Lease, s.RunningUntil = "", time.Time{}
	}
	return s
}
