package capacity

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// minutesOfDay are the minutes of a day (0–1439) at which a Cloud Scheduler
// job with this unix-cron schedule fires. The minute and hour fields take
// *, n, a-b, lists and /steps; the day, month and weekday fields must be *,
// since a job that runs on some days only overlaps no more than one that
// runs every day.
func minutesOfDay(schedule string) ([]int, error) {
	f := strings.Fields(schedule)
	if len(f) != 5 {
		return nil, fmt.Errorf("schedule %q: want 5 fields", schedule)
	}
	for _, x := range f[2:] {
		if x != "*" {
			return nil, fmt.Errorf("schedule %q: only * is read in the day, month and weekday fields", schedule)
		}
	}
	mins, err := cronField(f[0], 0, 59)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: minute: %w", schedule, err)
	}
	hours, err := cronField(f[1], 0, 23)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: hour: %w", schedule, err)
	}
	var out []int
	for _, h := range hours {
		for _, m := range mins {
			out = append(out, h*60+m)
		}
	}
	return out, nil
}

func cronField(s string, lo, hi int) ([]int, error) {
	set := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		rng, step := part, 1
		if r, st, ok := strings.Cut(part, "/"); ok {
			n, err := strconv.Atoi(st)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("step %q", st)
			}
			rng, step = r, n
		}
		a, b := lo, hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			x, y, _ := strings.Cut(rng, "-")
			var err1, err2 error
			a, err1 = strconv.Atoi(x)
			b, err2 = strconv.Atoi(y)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("range %q", rng)
			}
		default:
			n, err := strconv.Atoi(rng)
			if err != nil {
				return nil, fmt.Errorf("value %q", rng)
			}
			a, b = n, n
			if step != 1 {
				b = hi
			}
		}
		if a < lo || b > hi || a > b {
			return nil, fmt.Errorf("%q outside %d-%d", part, lo, hi)
		}
		for v := a; v <= b; v += step {
			set[v] = true
		}
	}
	var out []int
	for v := lo; v <= hi; v++ {
		if set[v] {
			out = append(out, v)
		}
	}
	return out, nil
}

// run is one job's invocation: it holds a request from start for hold.
type run struct {
	job   string
	start time.Duration // since midnight of the first day
	hold  time.Duration
}

// Overlap is the most requests a scheduled function holds at once, and the
// jobs' runs that hold them at that moment.
type Overlap struct {
	Peak int
	At   time.Duration // time of day of a moment of the peak
	Jobs []string      // the runs at that moment, by job name
}

// peakOverlap is the largest number of runs of jobs (name → schedule, each
// holding its request for hold[name]) in flight at one moment of a day. A
// run holds its request from its start to its start plus hold, both ends
// included: a run that ends as the next begins is counted with it, since
// neither Scheduler nor the run is on time to the millisecond.
func peakOverlap(schedules map[string]string, hold map[string]time.Duration) (Overlap, error) {
	var runs []run
	for job, s := range schedules {
		mins, err := minutesOfDay(s)
		if err != nil {
			return Overlap{}, fmt.Errorf("job %s: %w", job, err)
		}
		// Two days, so that runs begun the day before are in flight on
		// the second day, which is the one measured.
		for day := 0; day < 2; day++ {
			for _, m := range mins {
				runs = append(runs, run{job: job, start: time.Duration(day*1440+m) * time.Minute, hold: hold[job]})
			}
		}
	}
	// The count of runs in flight changes only at a start; with closed
	// intervals it is largest at some run's start, where it is the runs
	// started by then less those ended before.
	starts := make([]time.Duration, len(runs))
	ends := make([]time.Duration, len(runs))
	for i, r := range runs {
		starts[i], ends[i] = r.start, r.start+r.hold
	}
	slices.Sort(starts)
	slices.Sort(ends)
	var best Overlap
	for _, t := range starts {
		if t < 24*time.Hour {
			continue
		}
		begun, _ := slices.BinarySearch(starts, t+1)
		ended, _ := slices.BinarySearch(ends, t)
		// Of equal peaks, the earliest in the day (starts are in order):
		// the same report each run, whatever the map's order.
		if n := begun - ended; n > best.Peak {
			best = Overlap{Peak: n, At: t - 24*time.Hour}
		}
	}
	for _, o := range runs {
		if t := best.At + 24*time.Hour; best.Peak > 0 && o.start <= t && t <= o.start+o.hold {
			best.Jobs = append(best.Jobs, o.job)
		}
	}
	return best, nil
}
