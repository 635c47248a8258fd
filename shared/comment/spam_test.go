package comment

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNormalizeText(t *testing.T) {
	same := [][]string{
		{"Great video!", "great   VIDEO!", "  great\tvideo!\n", "great\u200b video!", "ｇｒｅａｔ video!"},
		{"Win 500 coins at bit.ly/abc", "win 500 coins at https://example.com/x", "WIN 500 COINS AT www.spam.example"},
	}
	for _, group := range same {
		want := NormalizeText(group[0])
		for _, s := range group[1:] {
			if got := NormalizeText(s); got != want {
				t.Errorf("NormalizeText(%q) = %q, want %q (of %q)", s, got, want, group[0])
			}
		}
	}
	different := []string{"great video!", "great video", "nice video!", "🔥", "😂", "a b", "ab", "see bit.ly/a", "see", "part 2?", "part 3?", "comment 1 of u", "comment 12 of u"}
	seen := map[string]string{}
	for _, s := range different {
		n := NormalizeText(s)
		if other, ok := seen[n]; ok {
			t.Errorf("NormalizeText(%q) = NormalizeText(%q) = %q", s, other, n)
		}
		seen[n] = s
	}
}

func TestDigestText(t *testing.T) {
	if DigestText("u1", "Hello  there bit.ly/a") != DigestText("u1", "hello there https://b.example/") {
		t.Error("texts that normalise alike digest apart")
	}
	if DigestText("u1", "hello") == DigestText("u2", "hello") {
		t.Error("two users' digests of one text are equal")
	}
	if DigestText("u1", "hello") == DigestText("u1", "hullo") {
		t.Error("two texts digest alike")
	}
	// The user and the text are length-prefixed: no shifting of bytes
	// between them gives the same digest.
	if DigestText("ab", "c") == DigestText("a", "bc") {
		t.Error("the digest does not separate the user from the text")
	}
}

func TestRecentTexts(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const window = 10 * time.Minute
	a, b := DigestText("u", "a"), DigestText("u", "b")
	var r RecentTexts
	r = r.Add(a, t0, window)
	for _, c := range []struct {
		d    TextDigest
		at   time.Duration
		want bool
	}{
		{a, 0, true}, {a, window - time.Millisecond, true}, {a, window, false}, {b, time.Second, false},
	} {
		if got := r.Seen(c.d, t0.Add(c.at), window); got != c.want {
			t.Errorf("Seen(%x, t0+%v) = %v, want %v", c.d, c.at, got, c.want)
		}
	}
	// Entries older than the window go on the next Add.
	r = r.Add(b, t0.Add(window), window)
	if diff := cmp.Diff(RecentTexts{{b, t0.Add(window)}}, r); diff != "" {
		t.Errorf("after the window (-want +got):\n%s", diff)
	}
	// The state is bounded, the newest kept.
	r = nil
	for i := range MaxRecentTexts + 5 {
		r = r.Add(DigestText("u", string(rune('a'+i%26))+string(rune('A'+i/26))), t0.Add(time.Duration(i)*time.Second), window)
	}
	if len(r) != MaxRecentTexts || len(r.Encode()) != MaxRecentTextsBytes {
		t.Fatalf("%d entries, %d bytes; want %d, %d", len(r), len(r.Encode()), MaxRecentTexts, MaxRecentTextsBytes)
	}
	if !r[len(r)-1].At.Equal(t0.Add((MaxRecentTexts + 4) * time.Second)) {
		t.Errorf("the newest entry was dropped: last at %v", r[len(r)-1].At)
	}
	if diff := cmp.Diff(r, DecodeRecentTexts(r.Encode())); diff != "" {
		t.Errorf("Decode(Encode) (-want +got):\n%s", diff)
	}
	// A trailing partial entry is ignored.
	if got := DecodeRecentTexts(append(r[:1].Encode(), 1, 2, 3)); len(got) != 1 {
		t.Errorf("decoded %d entries from one and a partial", len(got))
	}
}

func TestSpamRulesYoung(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := SpamRules{YoungAge: 24 * time.Hour}
	for _, c := range []struct {
		created time.Time
		rules   SpamRules
		want    bool
	}{
		{now.Add(-time.Hour), r, true},
		{now.Add(-24*time.Hour + time.Second), r, true},
		{now.Add(-24 * time.Hour), r, false},
		{time.Time{}, r, false},                   // no record: not young
		{now.Add(-time.Hour), SpamRules{}, false}, // the rule is off
	} {
		if got := c.rules.Young(c.created, now); got != c.want {
			t.Errorf("%+v.Young(%v) = %v, want %v", c.rules, c.created, got, c.want)
		}
	}
}
