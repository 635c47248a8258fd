package apitest

import (
	"net/http"
	"testing"
)

// TestCheckRefusesWhatTheDocumentDoesNot: the validator is live, so an
// answer that strays from docs/openapi.yaml fails the tests that check it.
func TestCheckRefusesWhatTheDocumentDoesNot(t *testing.T) {
	json := http.Header{"Content-Type": {"application/json"}}
	good := `{"reactions":[],"comments":[],"history":[],"settings":{"paused":false,"autoDeleteMonths":0}}`
	if err := Check("GET", "/v1/me/export", 200, json, []byte(good)); err != nil {
		t.Fatalf("a valid export refused: %v", err)
	}
	for name, c := range map[string]struct {
		method, path string
		status       int
		body         string
	}{
		"missing member":      {"GET", "/v1/me/export", 200, `{"reactions":[],"comments":[],"history":[]}`},
		"bad enum":            {"GET", "/v1/me/export", 200, `{"reactions":[{"contentId":"a","reaction":"none","version":1,"updateTime":"2026-01-01T00:00:00Z"}],"comments":[],"history":[],"settings":{"paused":false,"autoDeleteMonths":0}}`},
		"undocumented status": {"GET", "/v1/me/export", 418, `{}`},
		"unknown path":        {"GET", "/v1/nowhere", 200, `{}`},
		"unknown method":      {"PATCH", "/v1/me/export", 200, `{}`},
		"unknown path, 405":   {"GET", "/v1/nowhere", 405, `{}`},
		"unknown method, 404": {"PATCH", "/v1/me/export", 404, `{}`},
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
}
