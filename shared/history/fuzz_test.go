package history

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/pagetoken"
)

// Run longer with:
//
//	go test -run '^$' -fuzz FuzzEntryKey -fuzztime 60s ./shared/history/
//	go test -run '^$' -fuzz FuzzPageToken -fuzztime 60s ./shared/history/
//
// The seed corpora are in testdata/fuzz/<target>.

// maxMilli is 9999-12-31T23:59:59.999Z: watch times are in (epoch, maxMilli].
const maxMilli = 253402300799999

// fuzzTime maps any int64 to a watch time the service accepts.
func fuzzTime(ms int64) time.Time {
	if ms < 0 {
		ms = -(ms + 1)
	}
	return time.UnixMilli(1 + ms%maxMilli).UTC()
}

// fuzzVideo maps any string to a valid video id.
func fuzzVideo(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	if s == "" {
		return "v"
	}
	b := []byte(s)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		b[i] = alphabet[int(c)%len(alphabet)]
	}
	return string(b)
}

func FuzzEntryKey(f *testing.F) {
	f.Add("a", "a#b", int64(1_700_000_000_000), "v")
	f.Add("12", "123", int64(1), "abc")
	f.Add("abc", "abcd", int64(maxMilli), "zz")
	f.Fuzz(func(t *testing.T, u1, u2 string, ms int64, video string) {
		if u1 == "" || u2 == "" {
			return // tokens never carry an empty sub
		}
		at, v := fuzzTime(ms), fuzzVideo(video)

		// Round trip.
		k := EntryKey(u1, at, v)
		gotAt, gotV, err := ParseEntryKey(u1, k)
		if err != nil || !gotAt.Equal(at) || gotV != v {
			t.Fatalf("ParseEntryKey(%q, EntryKey(%q, %v, %q) = %q) = %v, %q, %v", u1, u1, at, v, k, gotAt, gotV, err)
		}
		if !inRange(k, UserPrefix(u1), UserEnd(u1)) || !inRange(LatestKey(u1, v), UserPrefix(u1), UserEnd(u1)) {
			t.Fatalf("keys of %q outside [%q, %q)", u1, UserPrefix(u1), UserEnd(u1))
		}

		// Newer sorts first.
		if at.UnixMilli() < maxMilli {
			if newer := EntryKey(u1, at.Add(time.Millisecond), v); newer >= k {
				t.Fatalf("a newer watch does not sort first: %q >= %q", newer, k)
			}
		}

		// Isolation of two users, both ways.
		if u1 == u2 {
			return
		}
		for _, pair := range [][2]string{{u1, u2}, {u2, u1}} {
			u, other := pair[0], pair[1]
			for _, ok := range []string{EntryKey(other, at, v), LatestKey(other, v)} {
				if inRange(ok, UserPrefix(u), UserEnd(u)) {
					t.Fatalf("key %q of user %q is inside the range of user %q", ok, other, u)
				}
				if _, _, err := ParseEntryKey(u, ok); err == nil {
					t.Fatalf("ParseEntryKey(%q) accepted key %q of user %q", u, ok, other)
				}
			}
		}
	})
}

func FuzzPageToken(f *testing.F) {
	// uid, cursor time and video, an alteration (position, xor) of the
	// issued token, and a token from anywhere.
	f.Add("alice", int64(1_700_000_000_000), "v", uint(0), byte(0), "")
	f.Add("alice", int64(1_700_000_000_000), "vv", uint(21), byte(1), ".")
	f.Add("a#b", int64(1), "abc", uint(5), byte(0x20), "garbage.mac")
	f.Fuzz(func(t *testing.T, uid string, ms int64, video string, pos uint, xor byte, token string) {
		if uid == "" {
			return
		}
		p := NewPageTokens(testSecret)
		c := Cursor{At: fuzzTime(ms), VideoID: fuzzVideo(video)}

		// Any token: never a panic, and never accepted unless Encode
		// made exactly it for this user.
		if got, err := p.Decode(uid, token); err == nil {
			if again := p.Encode(uid, got); again != token {
				t.Fatalf("Decode(%q, %q) accepted a token Encode did not make (it makes %q for %+v)", uid, token, again, got)
			}
		} else if !errors.Is(err, pagetoken.ErrInvalid) {
			t.Fatalf("Decode(%q, %q): %v, not pagetoken.ErrInvalid", uid, token, err)
		}

		// The issued token opens for its user only.
		tok := p.Encode(uid, c)
		if got, err := p.Decode(uid, tok); err != nil || !got.At.Equal(c.At) || got.VideoID != c.VideoID {
			t.Fatalf("Decode(Encode(%q, %+v)) = %+v, %v", uid, c, got, err)
		}
		for _, other := range []string{uid + "\x00", uid[:len(uid)-1], strings.ToUpper(uid) + "x"} {
			if other == uid || other == "" {
				continue
			}
			if got, err := p.Decode(other, tok); !errors.Is(err, pagetoken.ErrInvalid) {
				t.Fatalf("Decode(%q) of a token of %q = %+v, %v", other, uid, got, err)
			}
		}

		// Altered, it opens for nobody.
		if xor != 0 {
			b := []byte(tok)
			b[pos%uint(len(b))] ^= xor
			if got, err := p.Decode(uid, string(b)); !errors.Is(err, pagetoken.ErrInvalid) {
				t.Fatalf("token %q altered to %q: Decode = %+v, %v; want pagetoken.ErrInvalid", tok, b, got, err)
			}
		}
	})
}
