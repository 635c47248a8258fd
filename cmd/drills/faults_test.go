package main

import (
	"testing"
	"time"

	"github.com/videngage/engagement/cmd/soak/faults"
)

// freeze stops every process of one emulator of the drills' stack with
// SIGSTOP and returns the function that continues them. The test's cleanup
// continues them too, and a detached guard does after a minute should this
// process die in between.
func freeze(t *testing.T, name string) (thaw func()) {
	t.Helper()
	cont, err := faults.Freeze(emu, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s emulator frozen", name)
	thaw = func() {
		if err := cont(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(thaw)
	return thaw
}

// outage freezes an emulator for d and continues it. during, when not nil,
// runs beside the outage from the moment it began (from), and outage
// returns once both are over.
func outage(t *testing.T, name string, d time.Duration, during func(from time.Time)) (from, to time.Time) {
	t.Helper()
	thaw := freeze(t, name)
	from = time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if during != nil {
			during(from)
		}
	}()
	time.Sleep(d)
	to = time.Now()
	thaw()
	t.Logf("%s emulator running again", name)
	<-done
	return from, to
}
