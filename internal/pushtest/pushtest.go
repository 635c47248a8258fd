// Package pushtest delivers Pub/Sub pushes to an event function's handler
// in tests, and reads its answer as Pub/Sub does.
package pushtest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/videngage/engagement/shared/bus"
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
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != status || e.Error.Status == "" || e.Error.Message == "" {
		t.Errorf("answer %d %q is not the API's error body", status, body)
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
