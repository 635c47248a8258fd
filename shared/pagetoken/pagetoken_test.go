package pagetoken

import (
	"errors"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	s := NewSigner("secret")
	for _, payload := range []string{"", "x", "1700000000.abc", strings.Repeat("\x00\xff", 40)} {
		tok := s.Encode("list\x00a", payload)
		got, err := s.Decode("list\x00a", tok)
		if err != nil || got != payload {
			t.Errorf("Decode(Encode(%q)) = %q, %v", payload, got, err)
		}
		if strings.ContainsAny(tok, "+/=&?# %") {
			t.Errorf("token %q needs escaping in a URL", tok)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	s := NewSigner("secret")
	tok := s.Encode("list\x00a", "cursor")
	payload, mac, _ := strings.Cut(tok, ".")
	for name, tc := range map[string]struct{ scope, token string }{
		"other scope":          {"list\x00b", tok},
		"scope that extends":   {"list\x00a\x00", tok},
		"other secret":         {"list\x00a", NewSigner("other").Encode("list\x00a", "cursor")},
		"empty":                {"list\x00a", ""},
		"no mac":               {"list\x00a", payload},
		"truncated mac":        {"list\x00a", payload + "." + mac[:len(mac)-1]},
		"two dots":             {"list\x00a", tok + "."},
		"padded":               {"list\x00a", tok + "=="},
		"not base64":           {"list\x00a", "!!!.???"},
		"payload of another":   {"list\x00a", strings.Split(s.Encode("list\x00a", "other"), ".")[0] + "." + mac},
		"mac of another scope": {"list\x00a", payload + "." + strings.Split(s.Encode("list\x00b", "cursor"), ".")[1]},
		"CR in the mac":        {"list\x00a", payload + "." + mac[:3] + "\r" + mac[3:]},
		"LF in the payload":    {"list\x00a", payload[:2] + "\n" + payload[2:] + "." + mac},
	} {
		if got, err := s.Decode(tc.scope, tc.token); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Decode = %q, %v; want ErrInvalid", name, got, err)
		}
	}
}

// Every single-character change of a token is refused, including the ones
// a lenient base64 decoder maps to the same bytes (the spare low bits of a
// last character): payloads of 1, 2 and 3 bytes mod 3 cover all cases.
func TestDecodeIsStrict(t *testing.T) {
	s := NewSigner("secret")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
	for _, payload := range []string{"a", "ab", "abc"} {
		tok := s.Encode("scope", payload)
		for i := range len(tok) {
			for _, r := range alphabet {
				if byte(r) == tok[i] {
					continue
				}
				bad := tok[:i] + string(r) + tok[i+1:]
				if got, err := s.Decode("scope", bad); !errors.Is(err, ErrInvalid) {
					t.Errorf("token %q altered at %d to %q: Decode = %q, %v", tok, i, bad, got, err)
				}
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	s := NewSigner("secret")
	f.Add("scope", s.Encode("scope", "cursor"))
	f.Add("", "")
	f.Add("scope", "a.b")
	f.Fuzz(func(t *testing.T, scope, token string) {
		payload, err := s.Decode(scope, token)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode(%q, %q): %v, not ErrInvalid", scope, token, err)
			}
			return
		}
		// Accepted only if Encode makes exactly this token.
		if again := s.Encode(scope, payload); again != token {
			t.Fatalf("Decode(%q, %q) accepted a token Encode did not make (%q)", scope, token, again)
		}
	})
}

// A rotation's three steps (docs/operations.md): at every step, instances
// of the step before and of the new one open each other's tokens, and a
// token of a secret neither holds opens nowhere.
func TestRotationNeverLeavesInstancesDisagreeing(t *testing.T) {
	steps := []Signer{
		NewSigner("old"),        // before: sign old
		NewSigner("old", "new"), // 1: sign old, accept new
		NewSigner("new", "old"), // 2: sign new, accept old
		NewSigner("new"),        // 3: sign new
	}
	for i := 1; i < len(steps); i++ {
		for _, pair := range [][2]Signer{{steps[i-1], steps[i]}, {steps[i], steps[i-1]}} {
			tok := pair[0].Encode("list\x00a", "cursor")
			if got, err := pair[1].Decode("list\x00a", tok); err != nil || got != "cursor" {
				t.Errorf("step %d: a token of one side does not open on the other: %q, %v", i, got, err)
			}
		}
	}
	// Skipping step 1 is what the procedure forbids: an instance still on
	// the old secret alone refuses the new one's tokens.
	if _, err := steps[0].Decode("list\x00a", steps[2].Encode("list\x00a", "cursor")); !errors.Is(err, ErrInvalid) {
		t.Errorf("a signer without the new secret opened its token: %v", err)
	}
	if _, err := steps[2].Decode("list\x00a", NewSigner("third").Encode("list\x00a", "cursor")); !errors.Is(err, ErrInvalid) {
		t.Errorf("a token of a secret neither accepts opened: %v", err)
	}
}
