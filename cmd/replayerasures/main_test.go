package main

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		args  []string
		since time.Time
		dry   bool
		wait  time.Duration
		bad   bool
	}{
		{args: []string{"-restored-to", "2026-12-03T10:00:00Z"}, since: at.Add(-24 * time.Hour)},
		{args: []string{"-restored-to", "2026-12-03T11:00:00+01:00", "-open-for", "2h", "-dry-run"}, since: at.Add(-2 * time.Hour), dry: true},
		{args: []string{"-all", "-wait", "30m"}, wait: 30 * time.Minute},
		{args: nil, bad: true},
		{args: []string{"-all", "-restored-to", "2026-12-03T10:00:00Z"}, bad: true},
		{args: []string{"-restored-to", "yesterday"}, bad: true},
		{args: []string{"-all", "extra"}, bad: true},
		{args: []string{"-all", "-wait", "-1s"}, bad: true},
	} {
		o, err := parse(tt.args)
		if tt.bad {
			if err == nil {
				t.Errorf("%q: accepted as %+v", tt.args, o)
			}
			continue
		}
		if err != nil || !o.Since.Equal(tt.since) || o.DryRun != tt.dry || o.Wait != tt.wait {
			t.Errorf("%q: %+v, %v; want since %v, dry run %v, wait %v", tt.args, o, err, tt.since, tt.dry, tt.wait)
		}
	}
}
