package history

import "time"

// A view is a viewing, not a request: a user's watches of a video count one
// view per viewing window of server receive time, the window rolling from
// the last view counted (claimstore), and a watch dated more than a window
// before its receipt counts none. Both depend only on the watch's receipt
// (RecordedAt, set once when History accepts it and carried by every
// delivery of its message) and its watch time, so every delivery of an
// accepted watch is judged alike, whatever the order.

// CountsAsView reports whether w may count as a view under the viewing
// window: it is dated no earlier than one window before it was received.
// A backdated watch is still history, never a view.
func CountsAsView(w Watch, window time.Duration) bool {
	return !w.WatchedAt.Before(w.AcceptedAt().Add(-window))
}
