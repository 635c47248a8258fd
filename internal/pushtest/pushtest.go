// Package pushtest delivers Pub/Sub pushes to an event function's handler
// in tests, and reads its answer as Pub/Sub does.
package pushtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
)

// Outcome is what Pub/Sub does with a message after the handler's answer.
type Outcome int

const (
	// Acked: a success status Pub/Sub takes as the acknowledgement.
	Acked Outcome = iota
	// Refused: a 4xx, a poison message that Pub/Sub redelivers until its
	// dead-letter policy moves it to the dead-letter topic.
	Refused
	// Retried: a 5xx, a failure that a redelivery may fix.
	Retried
	// Malformed: an answer that breaks the contract (the test is failed).
	Malformed
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acknowledged"
	case Refused:
		return "refused as poison"
	case Retried:
		return "redelivered"
	case Malformed:
		return "a malformed answer"
	}
	return "unknown outcome"
}

// Deliver pushes msg, as subscription (a short name) pushes it, to h.
func Deliver(t testing.TB, h http.Handler, msg bus.Message, subscription string) Outcome {
	t.Helper()
	return DeliverBody(t, h, bus.PushBody(msg, subscription))
}

// DeliverBody posts body to h as a push request and returns what Pub/Sub
// makes of the answer. A failure answer must be the API's error body, and
// a success one of the statuses Pub/Sub acknowledges on; else the test
// fails (t.Errorf: Deliver may run on any goroutine) and the outcome is
// Malformed.
func DeliverBody(t testing.TB, h http.Handler, body []byte) Outcome {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return Read(t, rec.Code, rec.Body.Bytes())
}

// Read is what Pub/Sub makes of an answer of status and body.
func Read(t testing.TB, status int, body []byte) Outcome {
	t.Helper()
	switch status {
	case http.StatusOK, http.StatusCreated, http.StatusAccepted, http.StatusNoContent, http.StatusProcessing:
		return Acked
	}
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Status  string `json:"status"`
			Message string `json:"message"`
			Details []struct {
				Reason errs.Reason `json:"reason"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != status || e.Error.Status == "" || e.Error.Message == "" || len(e.Error.Details) == 0 {
		t.Errorf("answer %d %q is not the API's error body", status, body)
		return Malformed
	}
	// The reason of a push endpoint's refusal: the message can never be
	// applied, or the push itself is wrong; a failure is a backend's.
	want := map[int]errs.Reason{
		http.StatusBadRequest:            errs.InvalidMessage,
		http.StatusRequestEntityTooLarge: errs.BodyTooLarge,
		http.StatusMethodNotAllowed:      errs.MethodNotAllowed,
		http.StatusServiceUnavailable:    errs.BackendUnavailable,
		http.StatusInternalServerError:   errs.Internal,
	}[status]
	if got := e.Error.Details[0].Reason; got != want {
		t.Errorf("answer %d %q: reason %q, want %q", status, body, got, want)
		return Malformed
	}
	if status >= 500 {
		return Retried
	}
	if status < 400 {
		t.Errorf("answer %d: neither an acknowledgement nor a failure", status)
		return Malformed
	}
	return Refused
}

// Loopback is a topic and its push subscription in one, a publisher for
// tests: each message published is delivered, as a Pub/Sub push from
// Subscription, to Consume before Publish returns (Deliveries times, at
// least once, to act out redelivery), unless held; the test fails unless
// Consume acknowledges it.
type Loopback struct {
	T            testing.TB
	Consume      http.Handler
	Subscription string
	// Check, if set, says what is wrong with a message published (the test
	// is failed).
	Check func(data []byte) error

	mu         sync.Mutex
	deliveries int
	fail       error
	hold       bool
	held       []bus.Message
	published  []bus.Message
}

// Publish delivers the message, or answers the failure set by Fail.
func (p *Loopback) Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return "", p.fail
	}
	if p.Check != nil {
		if err := p.Check(data); err != nil {
			p.T.Errorf("published an invalid message %s: %v", data, err)
		}
	}
	msg := bus.Message{ID: fmt.Sprint(len(p.published) + 1), Data: data, Attributes: attrs}
	p.published = append(p.published, msg)
	if p.hold {
		p.held = append(p.held, msg)
		return msg.ID, nil
	}
	for range max(1, p.deliveries) {
		p.deliver(msg)
	}
	return msg.ID, nil
}

func (p *Loopback) deliver(msg bus.Message) {
	if got := Deliver(p.T, p.Consume, msg, p.Subscription); got != Acked {
		p.T.Errorf("%s: message %s: %v", p.Subscription, msg.ID, got)
	}
}

// Redeliver delivers every message published from now on n times (at least
// once).
func (p *Loopback) Redeliver(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deliveries = n
}

// Fail makes Publish answer err from now on (nil: publish again).
func (p *Loopback) Fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = err
}

// Hold holds (true) or delivers (false) the messages published from now on.
func (p *Loopback) Hold(hold bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = hold
}

// Release delivers the held messages.
func (p *Loopback) Release() {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, msg := range held {
		p.deliver(msg)
	}
}

// Published returns the messages published so far.
func (p *Loopback) Published() []bus.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bus.Message(nil), p.published...)
}

// Events is a Publisher of counter events that keeps each message for the
// test to deliver (or not, twice, out of order) to a consumer, and fails
// while SetFail holds an error.
type Events struct {
	mu   sync.Mutex
	msgs [][]events.Event
	fail error
}

// Publish keeps the message's events, or returns the failure set.
func (p *Events) Publish(_ context.Context, data []byte, _ map[string]string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return "", p.fail
	}
	m, err := events.Decode(data)
	if err != nil {
		return "", err
	}
	p.msgs = append(p.msgs, m.Events)
	return fmt.Sprint(len(p.msgs)), nil
}

// Take returns and forgets the messages published so far.
func (p *Events) Take() [][]events.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.msgs
	p.msgs = nil
	return out
}

// SetFail makes every Publish fail with err until it is set to nil.
func (p *Events) SetFail(err error) {
	p.mu.Lock()
	p.fail = err
	p.mu.Unlock()
}
