// Package reaction is the pure logic of reactions: the states none, like and
// dislike, the transition between two states with its version, event id and
// counter deltas, and the per-user rate limit. No I/O here; reactionstore
// keeps reactions in Spanner.
package reaction

import (
	"fmt"
	"strconv"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// Kind is a user's reaction to an item.
type Kind string

const (
	None    Kind = "none"
	Like    Kind = "like"
	Dislike Kind = "dislike"
)

// Parse returns the reaction named s.
func Parse(s string) (Kind, error) {
	switch Kind(s) {
	case None, Like, Dislike:
		return Kind(s), nil
	}
	return "", fmt.Errorf("reaction must be \"like\", \"dislike\" or \"none\", not %q", s)
}

// State is a user's current reaction on one item. The zero State is "none".
// Version counts the changes since the row was created (0 for none);
// Generation is drawn when the row is created, so that a like, an undo and a
// new like never share an event id. Created is the commit timestamp of the
// row's creation: zero for none, for a row not yet committed and for a row
// older than the column.
type State struct {
	Reaction   Kind
	Version    int64
	Generation int64
	Created    time.Time
}

// Tag is the version the API shows (the ETag, and the If-Match it takes):
// unique for the life of a (user, item), across undos. It is the row's
// creation commit timestamp in microseconds plus its changes since: every
// change of a row commits at a later microsecond than the one before (they
// write the same key), and an undo deletes the row at a later one still, so
// the next row's Tag is above every Tag of the rows before it, and an
// If-Match taken before an undo never matches a later row. None is 0; a row
// older than the column (Created zero) shows its Version, below every
// timestamp-based Tag.
func (s State) Tag() int64 {
	switch {
	case s.Current() == None:
		return 0
	case s.Created.IsZero():
		return s.Version
	}
	return s.Created.UnixMicro() + s.Version - 1
}

// Current normalises the zero value to None.
func (s State) Current() Kind {
	if s.Reaction == "" {
		return None
	}
	return s.Reaction
}

// Transition is the outcome of setting a reaction.
type Transition struct {
	From, To Kind
	// Next is the state to store (Reaction None: delete the row).
	Next State
	// Changed is false when the reaction was already To: nothing is written
	// and nothing counted.
	Changed bool
	// EventID identifies the change: (user, content, generation, version).
	EventID string
	// Deltas are the counter changes (none→like: likes+1, ...).
	Deltas []counter.Delta
}

// ErrVersionMismatch is returned by Apply when If-Match names another Tag
// than the current one.
type ErrVersionMismatch struct{ Current int64 }

func (e *ErrVersionMismatch) Error() string {
	return fmt.Sprintf("the reaction is at version %d", e.Current)
}

// Apply computes setting reaction to on cur. ifMatch, when not nil, is the
// Tag the caller believes current (412 otherwise). newGeneration is
// called only when a row is created.
func Apply(user, content string, cur State, to Kind, ifMatch *int64, newGeneration func() int64) (Transition, error) {
	from := cur.Current()
	if from == None {
		cur = State{Reaction: None}
	}
	if ifMatch != nil && *ifMatch != cur.Tag() {
		return Transition{}, &ErrVersionMismatch{Current: cur.Tag()}
	}
	t := Transition{From: from, To: to, Next: cur}
	if from == to {
		return t, nil
	}
	t.Changed = true
	var eventVersion int64
	switch {
	case to == None:
		// The row is deleted; the event is the row's next version.
		eventVersion = cur.Version + 1
		t.Next = State{Reaction: None}
		t.EventID = EventID(user, content, cur.Generation, eventVersion)
	case from == None:
		t.Next = State{Reaction: to, Version: 1, Generation: newGeneration()}
		t.EventID = EventID(user, content, t.Next.Generation, 1)
	default:
		t.Next = State{Reaction: to, Version: cur.Version + 1, Generation: cur.Generation, Created: cur.Created}
		t.EventID = EventID(user, content, cur.Generation, t.Next.Version)
	}
	t.Deltas = Deltas(content, from, to)
	return t, nil
}

// EventID is the id of the change that brought (user, content) of the given
// generation to version.
func EventID(user, content string, generation, version int64) string {
	return events.ID("r", user, content, strconv.FormatInt(generation, 10), strconv.FormatInt(version, 10))
}

// Deltas are the counter changes of a transition on content.
func Deltas(content string, from, to Kind) []counter.Delta {
	var ds []counter.Delta
	if f, ok := field(from); ok {
		ds = append(ds, counter.Delta{Key: content, Field: f, N: -1})
	}
	if f, ok := field(to); ok {
		ds = append(ds, counter.Delta{Key: content, Field: f, N: +1})
	}
	return ds
}

// Counted is what one account's reaction k adds to its item's counts: a like
// or a dislike, nothing for none.
func Counted(k Kind) counter.Values {
	var v counter.Values
	if f, ok := field(k); ok {
		v.Add(f, 1)
	}
	return v
}

func field(k Kind) (counter.Field, bool) {
	switch k {
	case Like:
		return counter.Likes, true
	case Dislike:
		return counter.Dislikes, true
	}
	return "", false
}

// Event is the published form of a transition. Flagged users' changes are
// recorded but not counted: their transition has no deltas and no event.
func (t Transition) Event(user, content string, at time.Time) events.Event {
	return events.Event{
		ID:     t.EventID,
		Kind:   events.KindReactionChanged,
		Outbox: true,
		Deltas: t.Deltas,
		Time:   at.UTC(),
		Reaction: &events.ReactionChange{
			UserID: user, ContentID: content, From: string(t.From), To: string(t.To), Version: t.Next.Version,
		},
	}
}

// UserReaction is one of a user's stored reactions: the item, its state and
// when it last changed.
type UserReaction struct {
	ContentID  string
	State      State
	UpdateTime time.Time
}
