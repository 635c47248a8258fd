// Package events is the envelope of the counter events published on Pub/Sub:
// versioned JSON, deterministic event ids, validation on decode. One message
// carries a batch of events (one per reaction change, comment, ...); each
// event carries its counter deltas, so every producer (reactions now, comments
// next) publishes through these types and one consumer applies them all.
package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/videngage/engagement/shared/counter"
)

// Version is the schema version this code writes and reads.
const Version = 1

// Limits of one message.
const (
	MaxEvents      = 1000 // events per message
	MaxDeltas      = 16   // deltas per event
	MaxEventIDLen  = 64
	MaxUserIDBytes = 512
	MaxViewers     = 1000 // viewer hashes per event
)

// Kind says what happened.
type Kind string

const (
	// KindCounterDelta is a change of counters and nothing more (comments,
	// reconciliation corrections).
	KindCounterDelta Kind = "counterDelta"
	// KindReactionChanged is a reaction transition; Reaction says which.
	KindReactionChanged Kind = "reactionChanged"
)

// Message is one Pub/Sub message: a batch of events.
type Message struct {
	V      int     `json:"v"`
	Events []Event `json:"events"`
}

// Event is one change with the counter deltas it causes.
type Event struct {
	// ID is deterministic in what happened (never random), so a re-publish of
	// the same change is recognised as the same event.
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Outbox says the deltas were written to the PendingDeltas outbox in the
	// transaction that made the change: the event counts iff those rows
	// still exist, and applying it deletes them. Without Outbox the consumer
	// records the id in AppliedEvents instead.
	Outbox bool            `json:"outbox,omitempty"`
	Deltas []counter.Delta `json:"deltas"`
	// Time is when the change was accepted (freshness is measured from it).
	Time     time.Time       `json:"time"`
	Reaction *ReactionChange `json:"reaction,omitempty"`
	// Viewers adds users (64-bit hashes of their ids) to the unique-viewers
	// sketch of each counter key: recorded watches. Adding one twice
	// changes nothing.
	Viewers map[string][]uint64 `json:"viewers,omitempty"`
}

// ReactionChange is the transition of one user's reaction on one item.
type ReactionChange struct {
	UserID    string `json:"userId"`
	ContentID string `json:"contentId"`
	From      string `json:"from"`
	To        string `json:"to"`
	Version   int64  `json:"version"`
}

// ID derives a deterministic event id from its parts: a short prefix naming
// the kind of change and a hash of the length-prefixed parts, so that no two
// different part lists share an id.
func ID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return prefix + "-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// ErrInvalid marks a message that can never be applied (poison): the consumer
// logs and acknowledges it.
var ErrInvalid = errors.New("events: invalid message")

// Encode returns the wire form of m.
func Encode(m Message) ([]byte, error) {
	m.V = Version
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// Decode parses and validates a message. Errors wrap ErrInvalid.
func Decode(b []byte) (Message, error) {
	if m, ok := decodeDirect(b); ok {
		if err := m.Validate(); err != nil {
			return Message{}, err
		}
		return m, nil
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

// Validate checks the whole message; errors wrap ErrInvalid.
func (m Message) Validate() error {
	if m.V != Version {
		return fmt.Errorf("%w: schema version %d, want %d", ErrInvalid, m.V, Version)
	}
	if len(m.Events) == 0 || len(m.Events) > MaxEvents {
		return fmt.Errorf("%w: %d events, want 1 to %d", ErrInvalid, len(m.Events), MaxEvents)
	}
	for i, e := range m.Events {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("%w: event %d: %w", ErrInvalid, i, err)
		}
	}
	return nil
}

// Validate checks one event.
func (e Event) Validate() error {
	switch {
	case e.ID == "" || len(e.ID) > MaxEventIDLen || !utf8.ValidString(e.ID):
		return fmt.Errorf("bad id %q", e.ID)
	case e.Kind != KindCounterDelta && e.Kind != KindReactionChanged:
		return fmt.Errorf("unknown kind %q", e.Kind)
	case len(e.Deltas) > MaxDeltas:
		return fmt.Errorf("%d deltas, at most %d", len(e.Deltas), MaxDeltas)
	case !e.Outbox && len(e.Deltas) == 0:
		return fmt.Errorf("no deltas")
	}
	for _, d := range e.Deltas {
		if err := d.Validate(); err != nil {
			return err
		}
	}
	n := 0
	for k, hs := range e.Viewers {
		if !counter.ValidKey(k) || len(hs) == 0 {
			return fmt.Errorf("bad viewers of %q", k)
		}
		n += len(hs)
	}
	if n > MaxViewers {
		return fmt.Errorf("%d viewers, at most %d", n, MaxViewers)
	}
	if e.Kind == KindReactionChanged {
		r := e.Reaction
		if r == nil {
			return fmt.Errorf("reactionChanged without reaction")
		}
		if r.UserID == "" || len(r.UserID) > MaxUserIDBytes || !utf8.ValidString(r.UserID) || !counter.ValidKey(r.ContentID) {
			return fmt.Errorf("bad reaction user or content")
		}
	}
	return nil
}

// Publisher sends one message; *bus.Publisher satisfies it.
type Publisher interface {
	Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error)
}

// Attributes set on every message. AttrKind says what a message is, as on
// every topic ("watches" on history-events, "account-erasure" on
// account-erasures): a consumer tells messages apart by it, never by
// looking at the data. AttrSchema is the data's version, for dashboards.
const (
	AttrKind    = "kind"
	KindValue   = "counters"
	AttrSchema  = "schema"
	SchemaValue = "counter-events/v1"
)

// Publish encodes evs as one message and publishes it, waiting for Pub/Sub's
// acknowledgement.
func Publish(ctx context.Context, p Publisher, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	b, err := Encode(Message{V: Version, Events: evs})
	if err != nil {
		return fmt.Errorf("events.Publish: %w", err)
	}
	if _, err := p.Publish(ctx, b, map[string]string{AttrKind: KindValue, AttrSchema: SchemaValue}); err != nil {
		return fmt.Errorf("events.Publish: %w", err)
	}
	return nil
}

// PublishAll publishes evs in messages of at most MaxEvents events.
func PublishAll(ctx context.Context, p Publisher, evs []Event) error {
	for len(evs) > 0 {
		n := min(len(evs), MaxEvents)
		if err := Publish(ctx, p, evs[:n]); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// publishTimeout bounds the publish that follows a commit;
// publishMargin is left of the request's deadline to write the answer.
const (
	publishTimeout = 15 * time.Second
	publishMargin  = 250 * time.Millisecond
)

// PublishCommitted publishes the events of changes already committed with
// their outbox rows (PendingDeltas), as every outbox writer does after its
// transaction. A failure is logged, not returned: the change is recorded
// and is the truth, its deltas stay pending (its author's own counts include
// them at once), and the rollup's relay republishes them once they are older
// than COUNTER_RELAY_AFTER. So a caller answers success for a committed
// change whatever Pub/Sub does, and a client never retries a write that
// took effect. It publishes even if ctx is cancelled (the change is
// committed) but returns before ctx's deadline when Pub/Sub does not
// answer.
func PublishCommitted(ctx context.Context, p Publisher, evs []Event) {
	if len(evs) == 0 {
		return
	}
	deadline := time.Now().Add(publishTimeout)
	if d, ok := ctx.Deadline(); ok && d.Add(-publishMargin).Before(deadline) {
		deadline = d.Add(-publishMargin)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	if err := PublishAll(ctx, p, evs); err != nil {
		slog.WarnContext(ctx, "events: counter events of a committed change not published; the outbox relay will republish them",
			"events", len(evs), "error", err.Error())
	}
}
