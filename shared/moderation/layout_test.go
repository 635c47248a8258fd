package moderation

import (
	"testing"
	"time"
)

func TestLayoutsRoundTrip(t *testing.T) {
	since := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ls := Layouts{Since: since, Current: Layout{144, 72}, Previous: Layout{16, 4}}
	got, err := DecodeLayouts(ls.Encode(), since)
	if err != nil || got != ls {
		t.Fatalf("DecodeLayouts(%q) = %+v, %v; want %+v", ls.Encode(), got, err, ls)
	}
	if l := got.At(since.Add(-5 * time.Minute)); l != ls.Previous {
		t.Errorf("a step before Since is cut by %v, want the previous %v", l, ls.Previous)
	}
	if l := got.At(since); l != ls.Current {
		t.Errorf("the step at Since is cut by %v, want the current %v", l, ls.Current)
	}
	for _, bad := range []string{"", "16/4", "16/17 16/4", "0/0 16/4", "5000/4 16/4", "x/y 16/4"} {
		if _, err := DecodeLayouts(bad, since); err == nil {
			t.Errorf("DecodeLayouts(%q) accepted", bad)
		}
	}
}
