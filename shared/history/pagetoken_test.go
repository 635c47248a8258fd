package history

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/pagetoken"
)

const testSecret = "page-token-test-secret"

func TestPageTokenRoundTrip(t *testing.T) {
	p := NewPageTokens(testSecret)
	for _, u := range append([]string{"alice"}, trickyUserIDs...) {
		for _, c := range []Cursor{
			{At: time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC), VideoID: "v"},
			{At: time.UnixMilli(1).UTC(), VideoID: strings.Repeat("-", 64)},
			{At: time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC), VideoID: "A_z-0"},
		} {
			tok := p.Encode(u, c)
			got, err := p.Decode(u, tok)
			if err != nil {
				t.Fatalf("Decode(%q, Encode(%q, %+v)): %v", u, u, c, err)
			}
			if diff := cmp.Diff(c, got); diff != "" {
				t.Errorf("user %q: cursor round trip (-want +got):\n%s", u, diff)
			}
			// A token is safe in a query string as it is.
			if strings.ContainsAny(tok, "+/=&?# %") {
				t.Errorf("token %q needs escaping in a URL", tok)
			}
		}
	}
}

func TestPageTokenIsOpaque(t *testing.T) {
	tok := NewPageTokens(testSecret).Encode("alice", Cursor{At: time.UnixMilli(1_700_000_000_000), VideoID: "v"})
	for _, leak := range []string{"alice", UserPrefix("alice"), testSecret} {
		if strings.Contains(tok, leak) {
			t.Errorf("token %q shows %q", tok, leak)
		}
	}
}

func TestPageTokenRejectsEveryAlteredCharacter(t *testing.T) {
	p := NewPageTokens(testSecret)
	const u = "alice"
	// Payload lengths 21, 22 and 23 bytes put 0, 2 and 4 spare bits in the
	// last base64 character of the payload.
	for _, c := range []Cursor{
		{At: time.UnixMilli(1_700_000_000_000).UTC(), VideoID: "v"},
		{At: time.UnixMilli(1_700_000_000_000).UTC(), VideoID: "vv"},
		{At: time.UnixMilli(1_700_000_000_000).UTC(), VideoID: "vvv"},
	} {
		tok := p.Encode(u, c)
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
		for i := range len(tok) {
			for _, r := range alphabet {
				if byte(r) == tok[i] {
					continue
				}
				bad := tok[:i] + string(r) + tok[i+1:]
				if got, err := p.Decode(u, bad); !errors.Is(err, pagetoken.ErrInvalid) {
					t.Errorf("token %q altered at %d to %q: Decode = %+v, %v; want pagetoken.ErrInvalid", tok, i, bad, got, err)
				}
			}
		}
	}
}

func TestPageTokenRejects(t *testing.T) {
	p := NewPageTokens(testSecret)
	const u = "alice"
	c := Cursor{At: time.UnixMilli(1_700_000_000_000).UTC(), VideoID: "v"}
	tok := p.Encode(u, c)
	payload, mac, _ := strings.Cut(tok, ".")
	otherPayload, otherMAC, _ := strings.Cut(p.Encode(u, Cursor{At: c.At.Add(time.Hour), VideoID: "w"}), ".")
	b64 := base64.RawURLEncoding.EncodeToString

	tests := map[string]struct {
		user, token string
		tokens      *PageTokens
	}{
		"another user":                {user: "bob", token: tok},
		"a user whose id extends":     {user: "alice#", token: tok},
		"a user who is a prefix":      {user: "alic", token: tok},
		"another secret":              {user: u, token: tok, tokens: ptr(NewPageTokens("another secret"))},
		"payload of another token":    {user: u, token: otherPayload + "." + mac},
		"mac of another token":        {user: u, token: payload + "." + otherMAC},
		"mac of another user":         {user: u, token: payload + "." + strings.SplitN(p.Encode("bob", c), ".", 2)[1]},
		"empty":                       {user: u, token: ""},
		"dot":                         {user: u, token: "."},
		"no mac":                      {user: u, token: payload},
		"empty mac":                   {user: u, token: payload + "."},
		"empty payload":               {user: u, token: "." + mac},
		"two dots":                    {user: u, token: payload + "." + mac + "."},
		"mac twice":                   {user: u, token: payload + "." + mac + mac},
		"truncated mac":               {user: u, token: payload + "." + mac[:len(mac)-1]},
		"padded base64":               {user: u, token: base64.URLEncoding.EncodeToString([]byte("x")) + "." + mac},
		"standard base64 alphabet":    {user: u, token: strings.NewReplacer("-", "+", "_", "/").Replace(tok) + "+/"},
		"spaces":                      {user: u, token: " " + tok},
		"raw suffix":                  {user: u, token: entrySuffix(c.At, c.VideoID)},
		"mac of nothing":              {user: u, token: "." + strings.SplitN(signed(p, u, ""), ".", 2)[1]},
		"not base64":                  {user: u, token: "!!!.???"},
		"huge":                        {user: u, token: strings.Repeat("A", 100_000) + "." + mac},
		"json":                        {user: u, token: `{"at":"2026-01-01T00:00:00Z","videoId":"v"}`},
		"signed payload not a cursor": {user: u, token: b64([]byte("hello#v")) + "." + strings.SplitN(signed(p, u, "hello#v"), ".", 2)[1]},
		"signed payload bad video":    {user: u, token: signed(p, u, ReverseTime(c.At)+"#a/b")},
		"signed payload short time":   {user: u, token: signed(p, u, ReverseTime(c.At)[1:]+"#v")},
		"signed negative time":        {user: u, token: signed(p, u, "-"+ReverseTime(c.At)[1:]+"#v")},
		"signed empty payload":        {user: u, token: signed(p, u, "")},
	}
	for name, tc := range tests {
		tokens := p
		if tc.tokens != nil {
			tokens = *tc.tokens
		}
		got, err := tokens.Decode(tc.user, tc.token)
		if !errors.Is(err, pagetoken.ErrInvalid) {
			t.Errorf("%s: Decode(%q, %q) = %+v, %v; want pagetoken.ErrInvalid", name, tc.user, tc.token, got, err)
		}
	}
}

// signed is a token whose mac is right for an arbitrary payload: what a
// leaked secret or a bug in Encode could produce.
func signed(p PageTokens, userID, payload string) string {
	return p.signer.Encode(pageScope(userID), payload)
}

func ptr[T any](v T) *T { return &v }
