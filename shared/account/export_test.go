package account

import (
	"testing"
	"time"
)

func TestExportLimit(t *testing.T) {
	l := ExportLimit{PerDay: 3}
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	const run = 10 * time.Minute
	var s Exports

	s, running, wait := l.Begin(s, t0, t0.Add(run), "a")
	if running || wait != 0 || s.Lease != "a" || len(s.Starts) != 1 {
		t.Fatalf("first export: %+v running=%v wait=%v", s, running, wait)
	}
	// One at a time: a second while the first runs waits for its deadline.
	if _, running, wait := l.Begin(s, t0.Add(time.Minute), t0.Add(time.Minute+run), "b"); !running || wait != run-time.Minute {
		t.Errorf("second while the first runs: running=%v wait=%v, want running, %v", running, wait, run-time.Minute)
	}
	// Another export's end does not free the user.
	if got := s.End("b"); got.Lease != "a" {
		t.Errorf("End of another lease cleared %+v", got)
	}
	s = s.End("a")
	for i, at := range []time.Duration{time.Hour, 2 * time.Hour} {
		var running bool
		s, running, wait = l.Begin(s, t0.Add(at), t0.Add(at+run), "c")
		if running || wait != 0 {
			t.Fatalf("export %d: running=%v wait=%v", i+2, running, wait)
		}
		s = s.End("c")
	}
	// The fourth in a day waits until the first is a day old.
	if _, running, wait := l.Begin(s, t0.Add(3*time.Hour), t0.Add(3*time.Hour+run), "d"); running || wait != 21*time.Hour {
		t.Errorf("fourth in a day: running=%v wait=%v, want 21h", running, wait)
	}
	// A lost export (never ended) holds the user only until its deadline.
	s, _, _ = l.Begin(Exports{}, t0, t0.Add(run), "lost")
	if _, running, wait := l.Begin(s, t0.Add(run), t0.Add(2*run), "e"); running || wait != 0 {
		t.Errorf("after a lost export's deadline: running=%v wait=%v", running, wait)
	}
	// A day later the starts of the day before no longer count.
	s, _, wait = l.Begin(Exports{Starts: []time.Time{t0, t0.Add(time.Hour), t0.Add(2 * time.Hour)}}, t0.Add(ExportDay), t0.Add(ExportDay+run), "f")
	if wait != 0 || len(s.Starts) != 3 {
		t.Errorf("a day after the first: wait=%v starts=%v, want admitted and 3 kept", wait, s.Starts)
	}
	// No limit.
	if _, running, wait := (ExportLimit{}).Begin(s, t0, t0.Add(run), "g"); running || wait != 0 {
		t.Errorf("no limit: running=%v wait=%v", running, wait)
	}
}
