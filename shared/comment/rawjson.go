package comment

import "unicode/utf8"

// CheckJSONText reports a JSON document whose strings are not valid UTF-8:
// raw bytes that are not UTF-8, or a \u escape of an unpaired surrogate.
// encoding/json silently turns both into U+FFFD, so the text of a comment is
// checked on the raw body, before decoding, to refuse it instead.
func CheckJSONText(doc []byte) error {
	if !utf8.Valid(doc) {
		return ErrInvalidUTF8
	}
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(doc) {
				return nil // malformed JSON: the decoder reports it
			}
			if doc[i+1] != 'u' {
				i++ // skip the escaped character
				continue
			}
			r, ok := hex4(doc, i+2)
			if !ok {
				return nil // malformed JSON: the decoder reports it
			}
			i += 5
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return ErrInvalidUTF8 // a low surrogate without its high half
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(doc) || doc[i+1] != '\\' || doc[i+2] != 'u' {
					return ErrInvalidUTF8
				}
				lo, ok := hex4(doc, i+3)
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return ErrInvalidUTF8
				}
				i += 6
			}
		}
	}
	return nil
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}
