package workload

import (
	"time"

	"github.com/videngage/engagement/shared/history"
)

// ViewWindowFor returns a viewing window of at least least whose window
// holding now (windows start at multiples of it since the Unix epoch) has
// now in its middle half: a run shorter than a quarter of it, started now,
// lies in one window, so each user's watches of a video count one view at
// most, and the model knows which. A stack under a load runs with it
// (VIEW_WINDOW) and the load's Spec names it.
func ViewWindowFor(now time.Time, least time.Duration) time.Duration {
	at := now.UnixMilli()
	for w := least.Round(time.Minute); ; w += time.Minute {
		ms := w.Milliseconds()
		if off := at % ms; off >= ms/4 && off < 3*ms/4 {
			return w
		}
	}
}

// countsAsView is whether a watch accepted at accepted counts as a view:
// the service's rule (history.CountsAsView) at the time the load saw it
// accepted. The load dates its watches either minutes before it sends them
// or more than a window before, so the time between the service's receipt
// and the load's acceptance cannot change the answer.
func countsAsView(k WatchKey, accepted time.Time, window time.Duration) bool {
	w := history.Watch{WatchedAt: time.UnixMilli(k.At).UTC(), RecordedAt: accepted}
	return history.CountsAsView(w, window)
}
