package account_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/account"
)

// TestLogObjectNames: a name holds the request time to the nanosecond and
// gives it back, names sort as their times do (across days, and within a
// second), a day is one prefix, and no name holds the user id.
func TestLogObjectNames(t *testing.T) {
	base := time.Date(2026, 12, 3, 23, 59, 59, 999_999_990, time.UTC)
	times := []time.Time{
		base, base.Add(9 * time.Nanosecond), base.Add(10 * time.Nanosecond), base.Add(-time.Hour),
		base.Add(24 * time.Hour), base.Add(-400 * 24 * time.Hour), base.Add(time.Millisecond).In(time.FixedZone("x", -8*3600)),
	}
	var names []string
	for i, at := range times {
		name := account.LogObjectName(at, "00ff")
		names = append(names, name)
		got, err := account.LogObjectTime(name)
		if err != nil || !got.Equal(at) {
			t.Errorf("%d: %s gives %v, %v; want %v", i, name, got, err, at)
		}
		if !strings.HasPrefix(name, account.LogPrefix+at.UTC().Format("2006-01-02")+"/") {
			t.Errorf("%d: %s is not under its UTC day", i, name)
		}
	}
	byName := slices.Clone(names)
	sort.Strings(byName)
	byTime := slices.Clone(names)
	slices.SortFunc(byTime, func(a, b string) int {
		ta, _ := account.LogObjectTime(a)
		tb, _ := account.LogObjectTime(b)
		return ta.Compare(tb)
	})
	if !slices.Equal(byName, byTime) {
		t.Errorf("names sort as\n%q\ntimes as\n%q", byName, byTime)
	}
	for _, bad := range []string{"erasures/", "erasures/2026-12-03", "other/2026-12-03/235959.999999999Z-00.json", "erasures/2026-13-03/235959.999999999Z-00.json", "erasures/2026-12-03/2359.json"} {
		if _, err := account.LogObjectTime(bad); err == nil {
			t.Errorf("%q: read as a log object", bad)
		}
	}
}

func TestLogDayPrefixes(t *testing.T) {
	since := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	got := account.LogDayPrefixes(since, since.Add(26*time.Hour))
	want := []string{"erasures/2026-12-01/", "erasures/2026-12-02/", "erasures/2026-12-03/"}
	if !slices.Equal(got, want) {
		t.Errorf("prefixes %q, want %q", got, want)
	}
	if got := account.LogDayPrefixes(since, since); !slices.Equal(got, want[:1]) {
		t.Errorf("one day: %q", got)
	}
	if got := account.LogDayPrefixes(since, since.Add(-48*time.Hour)); len(got) != 0 {
		t.Errorf("until before since: %q", got)
	}
}

func TestLogEntryCodec(t *testing.T) {
	e := account.LogEntry{UserID: "ann", RequestTime: time.Date(2026, 12, 3, 13, 1, 2, 3, time.FixedZone("x", 3600))}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"userId":"ann","requestTime":"2026-12-03T12:01:02.000000003Z"}` {
		t.Errorf("encoded %s", b)
	}
	got, err := account.DecodeLogEntry(b)
	if err != nil || got.UserID != "ann" || !got.RequestTime.Equal(e.RequestTime) {
		t.Errorf("decoded %+v, %v", got, err)
	}
	for _, bad := range []string{``, `{}`, `{"userId":"ann"}`, `{"requestTime":"2026-12-03T12:01:02Z"}`, `{"userId":"` + strings.Repeat("u", 513) + `","requestTime":"2026-12-03T12:01:02Z"}`, `[1]`} {
		if _, err := account.DecodeLogEntry([]byte(bad)); err == nil {
			t.Errorf("%.40q: decoded", bad)
		}
	}
}

type fakeLog struct {
	entries []account.LogEntry
	err     error
	since   time.Time
}

func (l *fakeLog) Since(_ context.Context, since time.Time) ([]account.LogEntry, error) {
	l.since = since
	return l.entries, l.err
}

// TestReplayLog: each user the log names is asked for once, in the order
// of their latest entry; a dry run asks for nothing; a user whose start
// fails is reported and does not stop the others; a log that cannot be
// read is an error before anything is asked for.
func TestReplayLog(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	log := &fakeLog{entries: []account.LogEntry{
		{UserID: "ann", RequestTime: at(1)}, {UserID: "bob", RequestTime: at(2)}, {UserID: "cy", RequestTime: at(3)},
		{UserID: "ann", RequestTime: at(4)}, {UserID: "dee", RequestTime: at(4)},
	}}
	var started []string
	start := func(fail string) func(context.Context, string) error {
		return func(_ context.Context, u string) error {
			started = append(started, u)
			if u == fail {
				return errors.New("backend down")
			}
			return nil
		}
	}

	rep, err := account.ReplayLog(context.Background(), log, start(""), at(1), false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bob", "cy", "ann", "dee"}; !slices.Equal(started, want) {
		t.Errorf("started %q, want %q", started, want)
	}
	if !log.since.Equal(at(1)) {
		t.Errorf("log read since %v", log.since)
	}
	if rep.Entries != 5 || rep.Users != 4 || rep.Started != 4 || len(rep.Failed) != 0 {
		t.Errorf("report %+v", rep)
	}

	started = nil
	rep, err = account.ReplayLog(context.Background(), log, start(""), time.Time{}, true)
	if err != nil || len(started) != 0 || rep.Users != 4 || rep.Started != 0 {
		t.Errorf("dry run: started %q, %+v, %v", started, rep, err)
	}

	started = nil
	rep, err = account.ReplayLog(context.Background(), log, start("cy"), time.Time{}, false)
	if err == nil || rep.Started != 3 || !slices.Equal(rep.Failed, []string{"cy"}) || len(started) != 4 {
		t.Errorf("a failed start: started %q, %+v, %v", started, rep, err)
	}

	started = nil
	log.err = errors.New("bucket down")
	if _, err := account.ReplayLog(context.Background(), log, start(""), time.Time{}, false); err == nil || len(started) != 0 {
		t.Errorf("log down: started %q, %v", started, err)
	}
}
