package reaction

import (
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/videngage/engagement/shared/counter"
)

// Fuzz targets of the reaction body and the transitions it drives. Seeds:
// the f.Add calls and testdata/fuzz/<target>. Run longer with:
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 60s ./shared/reaction/
//	go test -run '^$' -fuzz '^FuzzApply$' -fuzztime 60s ./shared/reaction/

// FuzzParse: Parse accepts exactly "none", "like" and "dislike", byte for
// byte (no case folding, no spaces), and never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"none", "like", "dislike", "", "Like", "LIKE", " like", "like\x00", "likes", "lіke", "null"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := Parse(s)
		known := s == "none" || s == "like" || s == "dislike"
		switch {
		case known && (err != nil || string(k) != s):
			t.Fatalf("Parse(%q) = %q, %v", s, k, err)
		case !known && err == nil:
			t.Fatalf("Parse(%q) accepted %q", s, k)
		}
	})
}

// indicator is what one user's reaction adds to the counts.
func indicator(k Kind) counter.Values {
	switch k {
	case Like:
		return counter.Values{Likes: 1}
	case Dislike:
		return counter.Values{Dislikes: 1}
	}
	return counter.Values{}
}

// FuzzApply: for any stored state, requested reaction and If-Match, a
// transition moves the counts by exactly the difference of the two
// reactions, bumps the version by one (a new row starts at 1, a removed one
// is gone), keeps or draws the generation, publishes a valid event with an
// id unique to (generation, version), and refuses a stale If-Match with the
// current version.
func FuzzApply(f *testing.F) {
	f.Add("u", "v1", uint8(0), int64(0), int64(0), uint8(1), false, int64(0), int64(42))
	f.Add("u", "v1", uint8(1), int64(3), int64(7), uint8(2), true, int64(3), int64(42))
	f.Add("u", "v1", uint8(2), int64(5), int64(9), uint8(0), true, int64(4), int64(42))
	f.Add("ü\x00#", "A-z_0", uint8(1), int64(1), int64(-1), uint8(1), true, int64(1), int64(0))
	f.Fuzz(func(t *testing.T, user, content string, curKind uint8, curVersion, curGen int64, toKind uint8, hasIfMatch bool, ifMatch, newGen int64) {
		kinds := []Kind{"", None, Like, Dislike}
		cur := State{Reaction: kinds[int(curKind)%len(kinds)], Version: curVersion, Generation: curGen}
		to := kinds[1+int(toKind)%3]
		if cur.Current() == None {
			cur.Version, cur.Generation = 0, 0 // no row: what the store reads
		} else if cur.Version < 1 || cur.Version >= 1<<53 {
			cur.Version = 1 + cur.Version&(1<<53-1) // stored rows start at 1 and grow by one per change
		}
		var im *int64
		if hasIfMatch {
			im = &ifMatch
		}
		drawn := 0
		tr, err := Apply(user, content, cur, to, im, func() int64 { drawn++; return newGen })
		if im != nil && *im != cur.Version {
			var mismatch *ErrVersionMismatch
			if !errors.As(err, &mismatch) || mismatch.Current != cur.Version {
				t.Fatalf("If-Match %d on version %d: %v", *im, cur.Version, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Apply(%+v → %s, If-Match %v): %v", cur, to, im, err)
		}
		from := cur.Current()
		if tr.From != from || tr.To != to || tr.Changed != (from != to) {
			t.Fatalf("Apply(%+v → %s) = %+v", cur, to, tr)
		}
		var moved counter.Values
		for _, d := range tr.Deltas {
			if d.Key != content {
				t.Fatalf("delta on %q, want %q", d.Key, content)
			}
			moved.Add(d.Field, d.N)
		}
		if want := indicator(to).Minus(indicator(from)); moved != want {
			t.Fatalf("%s → %s moves the counts by %+v, want %+v", from, to, moved, want)
		}
		if !tr.Changed {
			if tr.EventID != "" || drawn != 0 || tr.Next.Current() != from || tr.Next.Version != cur.Version {
				t.Fatalf("no-op %s → %s = %+v (drew %d generations)", from, to, tr, drawn)
			}
			return
		}
		switch {
		case to == None:
			if tr.Next.Current() != None || tr.EventID != EventID(user, content, cur.Generation, cur.Version+1) {
				t.Fatalf("removal = %+v", tr)
			}
		case from == None:
			if drawn != 1 || tr.Next != (State{Reaction: to, Version: 1, Generation: newGen}) || tr.EventID != EventID(user, content, newGen, 1) {
				t.Fatalf("creation = %+v (drew %d generations)", tr, drawn)
			}
		default:
			if drawn != 0 || tr.Next != (State{Reaction: to, Version: cur.Version + 1, Generation: cur.Generation}) ||
				tr.EventID != EventID(user, content, cur.Generation, cur.Version+1) {
				t.Fatalf("switch = %+v", tr)
			}
		}
		// The event of every change to a valid item by a user with an id (a
		// token's sub: 1 to 128 characters of UTF-8) is valid.
		if counter.ValidKey(content) && user != "" && utf8.ValidString(user) && utf8.RuneCountInString(user) <= 128 {
			ev := tr.Event(user, content, time.Unix(1_700_000_000, 0))
			if err := ev.Validate(); err != nil {
				t.Fatalf("event of %s → %s by %q on %q: %v", from, to, user, content, err)
			}
		}
	})
}
