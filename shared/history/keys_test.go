package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// trickyUserIDs are user ids whose raw bytes, or whose base64, are prefixes
// of one another, or that hold the key separators themselves.
var trickyUserIDs = []string{
	"a", "a#b", "a#", "#", "##", "#a", "a$", "$",
	"12", "123", "1", "1234",
	"ab", "abc", "abcd", "abcde", "abcdef", // base64 of "abc" is a prefix of the base64 of "abcd…"
	"YQ", "YQ#", // the base64 of "a" as a raw id
	"/", "//", "a/b", "a/", "..", "__x__",
	"é", "e", "é#", "日本", "日", "日本語", "🙂", "🙂🙂",
	"\x00", "\x00\x00", "a\x00", "a\x00b",
	"\xff", "\xfb\xff", "\xfb\xff\xbf", "~~~", ">>>", "???", // base64url '-' and '_'
	" ", "a b", "A", "aA",
	strings.Repeat("x", 127), strings.Repeat("x", 128),
}

// inRange reports whether key falls in the half-open range [start, end):
// what a Bigtable range scan of that range would return.
func inRange(key, start, end string) bool { return key >= start && key < end }

// userKeys are a sample of every kind of row key of user u.
func userKeys(u string) []string {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	var keys []string
	// The smallest and largest video ids and times bound the key space.
	for _, v := range []string{"-", "0", "zzzz", strings.Repeat("z", 64)} {
		for _, t := range []time.Time{at, time.UnixMilli(1).UTC(), time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)} {
			keys = append(keys, EntryKey(u, t, v))
		}
		keys = append(keys, LatestKey(u, v))
	}
	return keys
}

// checkIsolated fails when any row key of other falls in a range that a
// scan of user u reads, or parses as a row of u.
func checkIsolated(t *testing.T, u, other string) {
	t.Helper()
	horizon := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	ranges := [][2]string{
		{UserPrefix(u), UserEnd(u)},                                 // List without horizon, DeleteBefore(zero)
		{UserPrefix(u), HorizonKey(u, horizon)},                     // List with a horizon
		{BeforeKey(u, horizon), UserEnd(u)},                         // DeleteBefore(t)
		{Cursor{At: horizon, VideoID: "v"}.StartKey(u), UserEnd(u)}, // a next page
	}
	for _, k := range userKeys(other) {
		if strings.HasPrefix(k, UserPrefix(u)) {
			t.Errorf("key %q of user %q starts with the prefix %q of user %q", k, other, UserPrefix(u), u)
		}
		for _, r := range ranges {
			if inRange(k, r[0], r[1]) {
				t.Errorf("key %q of user %q is inside [%q, %q), a range of user %q", k, other, r[0], r[1], u)
			}
		}
		if _, _, err := ParseEntryKey(u, k); err == nil {
			t.Errorf("ParseEntryKey(%q, %q) accepted a key of user %q", u, k, other)
		}
	}
}

func TestUserKeysAreIsolated(t *testing.T) {
	t.Parallel()
	for _, u := range trickyUserIDs {
		for _, other := range trickyUserIDs {
			if u == other {
				continue
			}
			checkIsolated(t, u, other)
		}
	}
}

func TestUserKeysAreIsolatedRandomized(t *testing.T) {
	t.Parallel()
	// Ids built from pieces that collide in raw or base64 form, so that
	// random pairs often share long prefixes.
	pieces := []string{"a", "b", "1", "2", "#", "$", "/", "\x00", "\xff", "é", "日", "🙂", "YQ", "-", "_", "=", "~", "?"}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	randomID := func() string {
		var b strings.Builder
		for n := 1 + rng.IntN(8); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for range 1500 {
		u := randomID()
		other := randomID()
		if rng.IntN(3) == 0 {
			other = u + randomID() // a raw prefix of each other
		}
		if u == other {
			continue
		}
		checkIsolated(t, u, other)
		checkIsolated(t, other, u)
		if t.Failed() {
			t.Fatalf("seed %d: users %q and %q are not isolated", seed, u, other)
		}
	}
}

func TestUserKeysStayInTheUserRange(t *testing.T) {
	for _, u := range trickyUserIDs {
		for _, k := range userKeys(u) {
			if !inRange(k, UserPrefix(u), UserEnd(u)) {
				t.Errorf("key %q of user %q is outside its own range [%q, %q)", k, u, UserPrefix(u), UserEnd(u))
			}
		}
	}
}

func TestEntryKeyRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	for _, u := range trickyUserIDs {
		for _, v := range []string{"a", "v-1_x", strings.Repeat("Z", 64)} {
			gotAt, gotVideo, err := ParseEntryKey(u, EntryKey(u, at, v))
			if err != nil {
				t.Fatalf("ParseEntryKey(%q, EntryKey(%q, %v, %q)): %v", u, u, at, v, err)
			}
			if !gotAt.Equal(at) || gotAt.Location() != time.UTC || gotVideo != v {
				t.Errorf("ParseEntryKey(EntryKey(%q, %v, %q)) = %v, %q", u, at, v, gotAt, gotVideo)
			}
		}
	}
}

func TestParseEntryKeyRejects(t *testing.T) {
	const u = "alice"
	p := UserPrefix(u)
	good := EntryKey(u, time.UnixMilli(1_700_000_000_000), "v")
	rev := good[len(p) : len(p)+reverseDigits]
	for name, key := range map[string]string{
		"other user":           EntryKey("bob", time.UnixMilli(1_700_000_000_000), "v"),
		"prefix only":          p,
		"no video":             p + rev,
		"empty video":          p + rev + "#",
		"bad video":            p + rev + "#a/b",
		"video too long":       p + rev + "#" + strings.Repeat("v", 65),
		"short reverse time":   p + rev[1:] + "#v",
		"long reverse time":    p + "0" + rev + "#v",
		"letters in time":      p + "x" + rev[1:] + "#v",
		"negative time":        p + "-" + rev[1:] + "#v",
		"latest key":           LatestKey(u, "v"),
		"user end":             UserEnd(u),
		"horizon key":          HorizonKey(u, time.UnixMilli(1_700_000_000_000)),
		"empty":                "",
		"raw user id as prefx": u + "#" + rev + "#v",
	} {
		if at, v, err := ParseEntryKey(u, key); err == nil {
			t.Errorf("%s: ParseEntryKey(%q, %q) = %v, %q; want an error", name, u, key, at, v)
		}
	}
}

func TestEntryKeysSortNewestFirst(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type watch struct {
		at    time.Time
		video string
	}
	// In the order a user's history lists them: newest first, and at equal
	// times by video id.
	want := []watch{
		{base.Add(365 * 24 * time.Hour), "a"},
		{base.Add(time.Second), "a"},
		{base.Add(time.Millisecond), "b"},
		{base.Add(time.Microsecond), "z"},
		{base, "A"},
		{base, "a"},
		{base, "a-"},
		{base, "a_"},
		{base, "ab"},
		{base, "b"},
		{base.Add(-time.Microsecond), "a"},
		{base.Add(-time.Millisecond), "0"},
		{time.UnixMilli(1), "a"},
	}
	for _, u := range []string{"u", "a#b", "日本"} {
		keys := make([]string, len(want))
		for i, w := range want {
			keys[i] = EntryKey(u, w.at, w.video)
		}
		sorted := slices.Clone(keys)
		slices.Sort(sorted)
		if diff := cmp.Diff(keys, sorted); diff != "" {
			t.Errorf("user %q: keys do not sort newest first (-listing order +sorted):\n%s", u, diff)
		}
	}
}

func TestReverseTimeIsFixedWidth(t *testing.T) {
	for _, at := range []time.Time{
		time.UnixMilli(1),
		time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	} {
		if got := ReverseTime(at); len(got) != reverseDigits {
			t.Errorf("ReverseTime(%v) = %q: %d digits, want %d", at, got, len(got), reverseDigits)
		}
	}
}

func TestKeyTimeResolution(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 123_000_000, time.UTC)
	// The same watch recorded twice within its millisecond is one row.
	w1 := NewWatch("u", "v", at.Add(100*time.Microsecond), 1)
	w2 := NewWatch("u", "v", at.Add(999*time.Microsecond+999), 2)
	if w1.EventID != w2.EventID || !w1.WatchedAt.Equal(at) || !w2.WatchedAt.Equal(at) {
		t.Errorf("NewWatch in one millisecond: %+v and %+v; want both at %v with one event id", w1, w2, at)
	}
	if k1, k2 := EntryKey("u", w1.WatchedAt, "v"), EntryKey("u", w2.WatchedAt, "v"); k1 != k2 {
		t.Errorf("one watch, two keys: %q and %q", k1, k2)
	}
	// The next millisecond is another watch.
	w3 := NewWatch("u", "v", at.Add(time.Millisecond), 1)
	if w3.EventID == w1.EventID || EntryKey("u", w3.WatchedAt, "v") >= EntryKey("u", w1.WatchedAt, "v") {
		t.Errorf("a watch one millisecond later must be a new event sorting first: %+v vs %+v", w3, w1)
	}
	// Keys keep microseconds and drop nanoseconds.
	if ReverseTime(at) != ReverseTime(at.Add(999)) {
		t.Errorf("ReverseTime differs within a microsecond")
	}
	if ReverseTime(at) == ReverseTime(at.Add(time.Microsecond)) {
		t.Errorf("ReverseTime equal one microsecond apart")
	}
}

func TestNewWatchNormalizes(t *testing.T) {
	loc := time.FixedZone("UTC+2", 2*3600)
	local := time.Date(2026, 3, 4, 7, 6, 7, 123_456_789, loc)
	before := time.Now()
	got := NewWatch("u", "v", local, 42.5)
	if got.RecordedAt.Before(before) || got.RecordedAt.After(time.Now()) || got.RecordedAt.Location() != time.UTC {
		t.Errorf("RecordedAt = %v, want now in UTC", got.RecordedAt)
	}
	got.RecordedAt = time.Time{}
	want := Watch{
		EventID:         WatchEventID("u", "v", time.Date(2026, 3, 4, 5, 6, 7, 123_000_000, time.UTC)),
		UserID:          "u",
		VideoID:         "v",
		WatchedAt:       time.Date(2026, 3, 4, 5, 6, 7, 123_000_000, time.UTC),
		PositionSeconds: 42.5,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NewWatch (-want +got):\n%s", diff)
	}
}

func TestWatchEventIDSeparatesFields(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	ids := map[string]string{}
	for _, c := range []struct{ user, video string }{
		{"a", "b"}, {"a|b", "c"}, {"a", "b|c"}, {"ab", "c"}, {"a", "bc"}, {"1:a", "b"}, {"1", "a"},
	} {
		id := WatchEventID(c.user, c.video, at)
		if prev, dup := ids[id]; dup {
			t.Errorf("WatchEventID(%q, %q) = %s, the id of %s", c.user, c.video, id, prev)
		}
		ids[id] = fmt.Sprintf("(%q, %q)", c.user, c.video)
	}
	if WatchEventID("a", "b", at) == WatchEventID("a", "b", at.Add(time.Millisecond)) {
		t.Errorf("WatchEventID ignores the time")
	}
}

func TestHorizonAndBeforeKeys(t *testing.T) {
	h := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	videos := []string{"a", "Z", "0", "-", "_", "zzzz", strings.Repeat("z", 64), strings.Repeat("-", 64)}
	tests := []struct {
		at   time.Time
		kept bool // inside a List range that stops at HorizonKey(h); outside DeleteBefore(h)
	}{
		{h.Add(24 * time.Hour), true},
		{h.Add(time.Millisecond), true},
		{h.Add(time.Microsecond), true},
		{h, true}, // a watch exactly at the horizon is kept
		{h.Add(-time.Microsecond), false},
		{h.Add(-time.Millisecond), false},
		{h.Add(-24 * time.Hour), false},
		{time.UnixMilli(1), false},
	}
	for _, u := range []string{"u", "a", "a#b", "日本"} {
		for _, tc := range tests {
			for _, v := range videos {
				k := EntryKey(u, tc.at, v)
				if got := inRange(k, UserPrefix(u), HorizonKey(u, h)); got != tc.kept {
					t.Errorf("user %q, watch at %v of %q: in the List range before horizon %v = %v, want %v", u, tc.at, v, h, got, tc.kept)
				}
				if got := inRange(k, BeforeKey(u, h), UserEnd(u)); got == tc.kept {
					t.Errorf("user %q, watch at %v of %q: in the DeleteBefore(%v) range = %v, want %v", u, tc.at, v, h, got, !tc.kept)
				}
			}
		}
		if !(UserPrefix(u) < HorizonKey(u, h) && HorizonKey(u, h) < UserEnd(u)) {
			t.Errorf("user %q: HorizonKey %q is not inside [%q, %q)", u, HorizonKey(u, h), UserPrefix(u), UserEnd(u))
		}
	}
}

func TestCursorStartKey(t *testing.T) {
	const u = "u"
	at := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	c := Cursor{At: at, VideoID: "m"}
	start := c.StartKey(u)
	tests := []struct {
		at    time.Time
		video string
		after bool // on the next page
	}{
		{at, "m", false}, // the cursor's own row
		{at, "l", false},
		{at, "a", false},
		{at.Add(time.Microsecond), "z", false},
		{at, "m-", true}, // same time, video id that extends the cursor's
		{at, "m0", true},
		{at, "n", true},
		{at.Add(-time.Microsecond), "a", true},
		{at.Add(-time.Hour), "A", true},
	}
	for _, tc := range tests {
		k := EntryKey(u, tc.at, tc.video)
		if got := k >= start; got != tc.after {
			t.Errorf("row (%v, %q) after the cursor (%v, %q) = %v, want %v", tc.at, tc.video, c.At, c.VideoID, got, tc.after)
		}
	}
}
