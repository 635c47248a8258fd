package reactionsfn

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/videngage/engagement/shared/httpx"
)

// shortBody is enough for every body a client sends to PUT
// ({"reaction":"dislike"} and some whitespace).
const shortBody = 128

// decodePut reads the body of PUT. The body clients send, one object whose
// one member "reaction" is a string without escapes, is read directly;
// anything else (other members, escapes, a body that is not an object,
// larger, or malformed) goes to httpx.DecodeJSON, so every answer to a bad
// body stays the one the API documents.
func decodePut(w http.ResponseWriter, r *http.Request) (putBody, error) {
	var buf [shortBody + 1]byte
	n, err := io.ReadFull(r.Body, buf[:])
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		if v, ok := parseReactionBody(buf[:n]); ok {
			return putBody{Reaction: &v}, nil
		}
	}
	// Decode what was read followed by the rest, as if nothing had been read.
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf[:n]), r.Body), r.Body}
	var body putBody
	if err := httpx.DecodeJSON(w, r, &body); err != nil {
		return putBody{}, err
	}
	return body, nil
}

// parseReactionBody parses b as exactly {"reaction":"<string>"} with JSON
// whitespace anywhere between tokens and no escapes or control characters
// in the string; ok is false for anything else.
func parseReactionBody(b []byte) (reaction string, ok bool) {
	i := 0
	space := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	lit := func(s string) bool {
		space()
		if !bytes.HasPrefix(b[i:], []byte(s)) {
			return false
		}
		i += len(s)
		return true
	}
	if !lit("{") || !lit(`"reaction"`) || !lit(":") || !lit(`"`) {
		return "", false
	}
	start := i
	for i < len(b) && b[i] != '"' {
		if b[i] == '\\' || b[i] < 0x20 || b[i] >= 0x80 {
			return "", false
		}
		i++
	}
	if i == len(b) {
		return "", false
	}
	reaction = string(b[start:i])
	i++
	if !lit("}") {
		return "", false
	}
	space()
	return reaction, i == len(b)
}

// writeReaction writes the answer of PUT as httpx.WriteJSON writes
// ReactionBody, without reflection: the id is one of ^[A-Za-z0-9_-]{1,64}$
// (httpx.ValidateID) and the reaction one of like, dislike, none, so
// neither needs escaping.
func writeReaction(w http.ResponseWriter, b ReactionBody) {
	out := make([]byte, 0, 160)
	out = append(out, `{"contentId":"`...)
	out = append(out, b.ContentID...)
	out = append(out, `","reaction":"`...)
	out = append(out, b.Reaction...)
	out = append(out, `","version":`...)
	out = strconv.AppendInt(out, b.Version, 10)
	out = append(out, `,"updateTime":"`...)
	out = b.UpdateTime.AppendFormat(out, time.RFC3339Nano)
	out = append(out, "\"}\n"...)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}
