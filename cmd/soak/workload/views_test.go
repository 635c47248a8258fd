package workload

import (
	"testing"
	"time"
)

// The window found holds now in its middle half, whatever now is.
func TestViewWindowFor(t *testing.T) {
	start := time.Date(2026, 12, 2, 23, 59, 0, 0, time.UTC)
	for i := range 500 {
		now := start.Add(time.Duration(i) * 7919 * time.Second)
		w := ViewWindowFor(now, 6*time.Hour)
		off := now.UnixMilli() % w.Milliseconds()
		if w < 6*time.Hour || off < w.Milliseconds()/4 || off >= 3*w.Milliseconds()/4 {
			t.Fatalf("at %v: window %v, now %v into it", now, w, time.Duration(off)*time.Millisecond)
		}
	}
}

// Views count the users with a watch dated within a window of its
// acceptance, once each; backdated watches are history only.
func TestModelCountsViewsByWindow(t *testing.T) {
	const window = 6 * time.Hour
	m := NewModel(window)
	now := time.Now()
	watch := func(user string, age time.Duration) {
		m.AddWatch(WatchKey{User: user, Video: "v", At: now.Add(-age).UnixMilli()}, 0)
	}
	watch("ann", time.Minute)
	watch("ann", 2*time.Minute) // the same viewing window: no second view
	watch("bob", window+time.Minute)
	watch("cat", 48*time.Hour)
	watch("cat", 3*time.Minute)
	if got := m.Counts()["v"].Views; got != 2 {
		t.Errorf("views %d, want 2 (ann, cat)", got)
	}
	if got := m.UniqueViewers()["v"]; got != 2 {
		t.Errorf("unique viewers %d, want 2", got)
	}
	if got := m.Watches(); got != 5 {
		t.Errorf("watches %d, want 5", got)
	}
}
