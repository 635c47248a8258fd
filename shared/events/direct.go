package events

import (
	"bytes"
	"math"

	"github.com/videngage/engagement/shared/counter"
)

// decodeDirect parses a message in the form Encode writes it, without
// reflection: the members of Message, Event (Viewers aside), counter.Delta
// and ReactionChange by their exact names, each at most once, strings
// without escapes or bytes outside printable ASCII, integers, booleans. It
// reports ok false for anything else (null, other members, escapes, …),
// and the caller decodes with encoding/json, so what a message means never
// depends on which decoder read it (FuzzDecodeDirect compares them).
func decodeDirect(b []byte) (m Message, ok bool) {
	d := directDecoder{b: b}
	var v int64
	var seen uint8
	var evs []Event
	ok = d.object(func(key []byte) bool {
		switch string(key) {
		case "v":
			if !once(&seen, 1) {
				return false
			}
			return d.int(&v)
		case "events":
			if !once(&seen, 2) {
				return false
			}
			evs = make([]Event, 0, 32)
			return d.array(func() bool {
				evs = append(evs, Event{})
				return d.event(&evs[len(evs)-1])
			})
		}
		return false
	})
	d.space()
	if !ok || d.i != len(d.b) || seen != 3 || v != int64(int(v)) {
		return Message{}, false
	}
	return Message{V: int(v), Events: evs}, true
}

type directDecoder struct {
	b    []byte
	i    int
	last string // the string interned last
}

func (d *directDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

// byte consumes c, after whitespace.
func (d *directDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object parses {"key": value, …}, calling member for each key (which
// parses the value, and refuses keys it does not know or has seen).
func (d *directDecoder) object(member func(key []byte) bool) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	for {
		key, ok := d.rawStr()
		if !ok || !d.byte(':') || !member(key) {
			return false
		}
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// once sets bit in seen and reports whether it was clear: a member seen
// twice is left to encoding/json.
func once(seen *uint8, bit uint8) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// array parses [elem, …].
func (d *directDecoder) array(elem func() bool) bool {
	if !d.byte('[') {
		return false
	}
	if d.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.byte(']') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// rawStr returns the bytes of a string without escapes, control characters
// or bytes above ASCII (which encoding/json could rewrite).
func (d *directDecoder) rawStr() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) && d.b[d.i] != '"' {
		if c := d.b[d.i]; c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, false
		}
		d.i++
	}
	if d.i == len(d.b) {
		return nil, false
	}
	d.i++
	return d.b[start : d.i-1], true
}

func (d *directDecoder) str(out *string) bool {
	s, ok := d.rawStr()
	*out = d.intern(s)
	return ok
}

// intern returns s as a string, without a copy when it is one of the words
// every event repeats or the string interned last (a hot item's key).
func (d *directDecoder) intern(s []byte) string {
	switch string(s) {
	case string(KindReactionChanged):
		return string(KindReactionChanged)
	case string(KindCounterDelta):
		return string(KindCounterDelta)
	case string(counter.Likes):
		return string(counter.Likes)
	case string(counter.Dislikes):
		return string(counter.Dislikes)
	case "like":
		return "like"
	case "dislike":
		return "dislike"
	case "none":
		return "none"
	case d.last:
		return d.last
	}
	d.last = string(s)
	return d.last
}

func (d *directDecoder) int(out *int64) bool {
	d.space()
	neg := d.i < len(d.b) && d.b[d.i] == '-'
	if neg {
		d.i++
	}
	digits := d.i
	// Accumulated negative, so that the most negative int64 fits.
	var n int64
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		c := int64(d.b[d.i] - '0')
		if n < (math.MinInt64+c)/10 {
			return false // out of range
		}
		n = n*10 - c
		d.i++
	}
	if d.i == digits || d.b[digits] == '0' && d.i > digits+1 {
		return false
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return false
	}
	if !neg {
		if n == math.MinInt64 {
			return false
		}
		n = -n
	}
	*out = n
	return true
}

func (d *directDecoder) bool(out *bool) bool {
	d.space()
	switch {
	case bytes.HasPrefix(d.b[d.i:], []byte("true")):
		d.i += 4
		*out = true
		return true
	case bytes.HasPrefix(d.b[d.i:], []byte("false")):
		d.i += 5
		*out = false
		return true
	}
	return false
}

func (d *directDecoder) event(e *Event) bool {
	var seen uint8
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return once(&seen, 1) && d.str(&e.ID)
		case "kind":
			return once(&seen, 2) && d.str((*string)(&e.Kind))
		case "outbox":
			return once(&seen, 4) && d.bool(&e.Outbox)
		case "deltas":
			e.Deltas = make([]counter.Delta, 0, 1)
			return once(&seen, 8) && d.array(func() bool {
				e.Deltas = append(e.Deltas, counter.Delta{})
				return d.delta(&e.Deltas[len(e.Deltas)-1])
			})
		case "time":
			// Time's own decoder, on the quoted text: the same answer as
			// encoding/json's.
			d.space()
			start := d.i
			_, ok := d.rawStr()
			return once(&seen, 16) && ok && e.Time.UnmarshalJSON(d.b[start:d.i]) == nil
		case "reaction":
			e.Reaction = &ReactionChange{}
			return once(&seen, 32) && d.reaction(e.Reaction)
		}
		return false
	})
}

func (d *directDecoder) delta(x *counter.Delta) bool {
	var seen uint8
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "key":
			return once(&seen, 1) && d.str(&x.Key)
		case "field":
			return once(&seen, 2) && d.str((*string)(&x.Field))
		case "n":
			return once(&seen, 4) && d.int(&x.N)
		}
		return false
	})
}

func (d *directDecoder) reaction(r *ReactionChange) bool {
	var seen uint8
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "userId":
			return once(&seen, 1) && d.str(&r.UserID)
		case "contentId":
			return once(&seen, 2) && d.str(&r.ContentID)
		case "from":
			return once(&seen, 4) && d.str(&r.From)
		case "to":
			return once(&seen, 8) && d.str(&r.To)
		case "version":
			return once(&seen, 16) && d.int(&r.Version)
		}
		return false
	})
}
