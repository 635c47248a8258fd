package apitest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/errs"
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
	errBody := []byte(`{"error":{"code":404,"status":"NOT_FOUND","message":"no such resource","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"UNKNOWN_PATH","domain":"engagement.videngage.dev"}]}}`)
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
	info := `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INVALID_ID","domain":"engagement.videngage.dev"}`
	field := `{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"videoId","description":"bad id"}]}`
	body := func(code int, status, details string) []byte {
		return []byte(fmt.Sprintf(`{"error":{"code":%d,"status":%q,"message":"bad id","details":[%s]}}`, code, status, details))
	}
	good := Answer{Code: 400, Header: json, Body: body(400, "INVALID_ARGUMENT", info+","+field)}
	r := &errRecorder{TB: t}
	CheckError(r, "good", good, 400, "INVALID_ARGUMENT", errs.InvalidID)
	if len(r.errors) != 0 {
		t.Fatalf("the spec's error body refused: %v", r.errors)
	}
	retry := http.Header{"Content-Type": json["Content-Type"], "Retry-After": {"2"}}
	limited := `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMITED","domain":"engagement.videngage.dev","metadata":{"limit":"reactions"}}`
	r = &errRecorder{TB: t}
	CheckError(r, "429", Answer{Code: 429, Header: retry, Body: body(429, "RESOURCE_EXHAUSTED", limited+`,{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2s"}`)}, 429, "RESOURCE_EXHAUSTED", errs.RateLimited)
	if len(r.errors) != 0 {
		t.Fatalf("a 429 with RetryInfo refused: %v", r.errors)
	}
	for name, c := range map[string]struct {
		a      Answer
		reason errs.Reason
	}{
		"other status":     {Answer{Code: 404, Header: json, Body: good.Body}, errs.InvalidID},
		"not JSON":         {Answer{Code: 400, Header: http.Header{"Content-Type": {"text/plain"}}, Body: good.Body}, errs.InvalidID},
		"not an object":    {Answer{Code: 400, Header: json, Body: []byte(`[]`)}, errs.InvalidID},
		"extra member":     {Answer{Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"m","details":[` + info + `]},"x":1}`)}, errs.InvalidID},
		"extra field":      {Answer{Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"m","details":[` + info + `],"x":1}}`)}, errs.InvalidID},
		"no details":       {Answer{Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"m"}}`)}, errs.InvalidID},
		"empty details":    {Answer{Code: 400, Header: json, Body: body(400, "INVALID_ARGUMENT", "")}, errs.InvalidID},
		"BadRequest first": {Answer{Code: 400, Header: json, Body: body(400, "INVALID_ARGUMENT", field+","+info)}, errs.InvalidID},
		"other reason":     {good, errs.InvalidValue},
		"other domain":     {Answer{Code: 400, Header: json, Body: body(400, "INVALID_ARGUMENT", `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INVALID_ID","domain":"example.com"}`)}, errs.InvalidID},
		"no violations":    {Answer{Code: 400, Header: json, Body: body(400, "INVALID_ARGUMENT", info+`,{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[]}`)}, errs.InvalidID},
		"RetryInfo on 400": {Answer{Code: 400, Header: json, Body: body(400, "INVALID_ARGUMENT", info+`,{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2s"}`)}, errs.InvalidID},
		"429 no RetryInfo": {Answer{Code: 429, Header: retry, Body: body(429, "RESOURCE_EXHAUSTED", limited)}, errs.RateLimited},
		"429 other delay":  {Answer{Code: 429, Header: retry, Body: body(429, "RESOURCE_EXHAUSTED", limited+`,{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"}`)}, errs.RateLimited},
		"wrong code":       {Answer{Code: 400, Header: json, Body: body(500, "INVALID_ARGUMENT", info)}, errs.InvalidID},
		"wrong status":     {Answer{Code: 400, Header: json, Body: body(400, "INTERNAL", info)}, errs.InvalidID},
		"no message":       {Answer{Code: 400, Header: json, Body: []byte(`{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"","details":[` + info + `]}}`)}, errs.InvalidID},
	} {
		r := &errRecorder{TB: t}
		code, status := 400, "INVALID_ARGUMENT"
		if c.reason == errs.RateLimited {
			code, status = 429, "RESOURCE_EXHAUSTED"
		}
		CheckError(r, name, c.a, code, status, c.reason)
		if len(r.errors) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestErrorReasonsMatchTheDocument: the document's ErrorReason enum is the
// Go constants exactly, each value described, and docs/api.md lists each.
func TestErrorReasonsMatchTheDocument(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile(docPath())
	if err != nil {
		t.Fatal(err)
	}
	s := doc.Components.Schemas["ErrorReason"]
	if s == nil || s.Value == nil {
		t.Fatal("docs/openapi.yaml has no ErrorReason schema")
	}
	var inDoc []string
	for _, v := range s.Value.Enum {
		inDoc = append(inDoc, fmt.Sprint(v))
	}
	var inGo []string
	for _, r := range errs.Reasons {
		inGo = append(inGo, string(r))
	}
	slices.Sort(inDoc)
	slices.Sort(inGo)
	if diff := cmp.Diff(inGo, inDoc); diff != "" {
		t.Errorf("ErrorReason enum (-errs.Reasons +docs/openapi.yaml):\n%s", diff)
	}
	descs, _ := s.Value.Extensions["x-enum-descriptions"].([]any)
	if len(descs) != len(s.Value.Enum) {
		t.Errorf("x-enum-descriptions holds %d descriptions for %d values", len(descs), len(s.Value.Enum))
	}
	api, err := os.ReadFile(filepath.Join(filepath.Dir(docPath()), "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range errs.Reasons {
		if !strings.Contains(string(api), "| `"+string(r)+"` |") {
			t.Errorf("docs/api.md's table of reasons has no row for %s", r)
		}
	}
}

// TestCheckValidatesErrorDetails: the document's Error schema takes each
// detail type, told apart by @type, and refuses a reason it does not list.
func TestCheckValidatesErrorDetails(t *testing.T) {
	json := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"2"}}
	body := func(details string) []byte {
		return []byte(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"slow down","details":[` + details + `]}}`)
	}
	info := `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMITED","domain":"engagement.videngage.dev","metadata":{"limit":"reactions"}}`
	retry := `{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2s"}`
	field := `{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"text","description":"d"}]}`
	if err := Check("PUT", "/v1/reactions/v1", 429, json, body(info+","+field+","+retry)); err != nil {
		t.Fatalf("valid details refused: %v", err)
	}
	for name, details := range map[string]string{
		"no details":        ``,
		"unknown reason":    strings.Replace(info, "RATE_LIMITED", "SLOW_DOWN", 1),
		"unknown type":      `{"@type":"type.googleapis.com/google.rpc.Help","links":[]}`,
		"other domain":      strings.Replace(info, "engagement.videngage.dev", "example.com", 1),
		"ErrorInfo fields":  `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","retryDelay":"2s"}`,
		"bad retryDelay":    info + `,{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2"}`,
		"metadata a number": strings.Replace(info, `"reactions"`, `3`, 1),
	} {
		if err := Check("PUT", "/v1/reactions/v1", 429, json, body(details)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
