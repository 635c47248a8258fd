package accountfn

import (
	"encoding/json"
	"io"
	"strconv"
)

// objectStream writes one JSON object a member at a time, an array member
// an item at a time, so that a document of any size passes through bounded
// memory. The first write error sticks and ends the stream.
type objectStream struct {
	w       io.Writer
	enc     *json.Encoder
	err     error
	members int
	items   int
}

func newObjectStream(w io.Writer) *objectStream {
	s := &objectStream{w: w, enc: json.NewEncoder(w)}
	s.raw("{")
	return s
}

func (s *objectStream) raw(text string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, text)
	}
}

func (s *objectStream) name(n string) {
	if s.members > 0 {
		s.raw(",")
	}
	s.members++
	s.raw(strconv.Quote(n) + ":")
}

// beginArray opens the array member n; item adds to it and endArray closes it.
func (s *objectStream) beginArray(n string) {
	s.name(n)
	s.raw("[")
	s.items = 0
}

func (s *objectStream) item(v any) {
	if s.items > 0 {
		s.raw(",")
	}
	s.items++
	if s.err == nil {
		s.err = s.enc.Encode(v)
	}
}

func (s *objectStream) endArray() { s.raw("]") }

// member writes the member n with the value v.
func (s *objectStream) member(n string, v any) {
	s.name(n)
	if s.err == nil {
		s.err = s.enc.Encode(v)
	}
}

// end closes the object; it returns the first error of the stream.
func (s *objectStream) end() error {
	s.raw("}\n")
	return s.err
}
