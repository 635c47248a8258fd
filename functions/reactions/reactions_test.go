package reactionsfn

import "testing"

func TestParseIfMatch(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want int64 // -1: no condition
	}{
		{nil, -1}, {[]string{"*"}, -1}, {[]string{`"3"`}, 3}, {[]string{"3"}, 3}, {[]string{`W/"0"`}, 0}, {[]string{` "12" `}, 12},
	} {
		got, err := parseIfMatch(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if (got == nil) != (c.want == -1) || got != nil && *got != c.want {
			t.Errorf("%q: got %v, want %d", c.in, got, c.want)
		}
	}
	for _, in := range [][]string{{`"x"`}, {`"-1"`}, {`"1"`, `"2"`}, {""}} {
		if _, err := parseIfMatch(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	if etag(7) != `"7"` {
		t.Error(etag(7))
	}
}
