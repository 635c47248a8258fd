package session

import (
	"errors"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	for _, ts := range []time.Time{
		time.Date(2026, 12, 2, 17, 58, 1, 123456000, time.UTC),
		time.Unix(0, 1).UTC(),
		time.Date(2262, 4, 11, 0, 0, 0, 0, time.UTC),
	} {
		tok := Encode(ts)
		got, err := Parse(tok)
		if err != nil || !got.Equal(ts) {
			t.Errorf("Parse(Encode(%v)) = %v, %v", ts, got, err)
		}
		if len(tok) != 11 {
			t.Errorf("Encode(%v) = %q, want 11 characters", ts, tok)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	valid := Encode(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	for _, tok := range []string{
		"",
		"not a token",
		valid + "A",         // 9 bytes' worth
		valid[:10],          // 7 bytes and a bit
		valid + "=",         // padding
		"AAAAAAAAAAA",       // the epoch itself: never a commit time
		"gAAAAAAAAAA",       // negative nanoseconds
		valid[:10] + "B",    // non-zero trailing bits: a second spelling
		"2026-12-02T00:00Z", // a time, not a token
	} {
		if got, err := Parse(tok); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, %v; want ErrInvalid", tok, got, err)
		}
	}
}
