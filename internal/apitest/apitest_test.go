package apitest

import (
	"fmt"
	"net/http"
	"testing"
)

// TestCheckRefusesWhatTheDocumentDoesNot: the validator is live, so an
// answer that strays from docs/openapi.yaml fails the tests that check it.
func TestCheckRefusesWhatTheDocumentDoesNot(t *testing.T) {
	json := http.Header{"Content-Type": {"application/json"}}
	good := `{"kind":"export","reactions":[],"comments":[],"history":[],"settings":{"paused":false,"autoDeleteMonths":0},"moderation":[]}`
	if err := Check("GET", "/v1/me/export", 200, json, []byte(good)); err != nil {
		t.Fatalf("a valid export refused: %v", err)
	}
	for name, c := range map[string]struct {
		method, path string
		status       int
		body         string
	}{
		"missing member":      {"GET", "/v1/me/export", 200, `{"reactions":[],"comments":[],"history":[]}`},
		"bad enum":            {"GET", "/v1/me/export", 200, `{"reactions":[{"contentId":"a","reaction":"none","version":1,"updateTime":"2026-01-01T00:00:00Z"}],"comments":[],"history":[],"settings":{"paused":false,"autoDeleteMonths":0},"moderation":[]}`},
		"undocumented status": {"GET", "/v1/me/export", 418, `{}`},
		// The default answer is what a client must expect; the server's own
		// statuses are each listed.
		"status only the default covers": {"GET", "/v1/me/export", 418, `{"error":{"code":418,"status":"INTERNAL","message":"internal error"}}`},
		"unknown path":                   {"GET", "/v1/nowhere", 200, `{}`},
		"unknown method":                 {"PATCH", "/v1/me/export", 200, `{}`},
		"unknown path, 405":              {"GET", "/v1/nowhere", 405, `{}`},
		"unknown method, 404":            {"PATCH", "/v1/me/export", 404, `{}`},
	} {
		if err := Check(c.method, c.path, c.status, json, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// What the document has no operation for is answered as having none.
	errBody := []byte(`{"error":{"code":404,"status":"NOT_FOUND","message":"no such resource"}}`)
	if err := Check("GET", "/v1/nowhere", 404, json, errBody); err != nil {
		t.Errorf("404 of an unknown path: %v", err)
	}
	if err := Check("PATCH", "/v1/me/export", 405, json, errBody); err != nil {
		t.Errorf("405 of an unknown method: %v", err)
	}
	if err := Check("OPTIONS", "/v1/me/export", 204, nil, nil); err != nil {
		t.Errorf("a preflight: %v", err)
	}
	// The routes outside the public API are not the document's.
	if err := Check("POST", "/internal/rollup", 200, json, []byte(`{"folded":1}`)); err != nil {
		t.Errorf("a job's answer checked against the public API: %v", err)
	}
}

// errRecorder is a testing.TB that records Errorf instead of failing.
type errRecorder struct {
	testing.TB
	errors []string
}

func (r *errRecorder) Helper() {}
func (r *errRecorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestCheckErrorRefusesAnotherShape: CheckError passes the spec's error
// body and refuses every way of straying from it.
func TestCheckErrorRefusesAnotherShape(t *testing.T) {
	json := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	good := Answer{Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"bad id"}}`)}
	r := &errRecorder{TB: t}
	CheckError(r, "good", good, 400, "INVALID_ARGUMENT")
	if len(r.errors) != 0 {
		t.Fatalf("the spec's error body refused: %v", r.errors)
	}
	for name, a := range map[string]Answer{
		"other status":  {Code: 404, Header: json, Body: good.Body},
		"not JSON":      {Code: 400, Header: http.Header{"Content-Type": {"text/plain"}}, Body: good.Body},
		"not an object": {Code: 400, Header: json, Body: []byte(`[]`)},
		"extra member":  {Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"m"},"x":1}`)},
		"extra field":   {Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"m","details":[]}}`)},
		"wrong code":    {Code: 400, Header: json, Body: []byte(`{"error":{"code":500,"status":"INVALID_ARGUMENT","message":"m"}}`)},
		"wrong status":  {Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INTERNAL","message":"m"}}`)},
		"no message":    {Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":""}}`)},
	} {
		r := &errRecorder{TB: t}
		CheckError(r, name, a, 400, "INVALID_ARGUMENT")
		if len(r.errors) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
}
