// Package apitest checks answers of the public API against docs/openapi.yaml
// with a third-party validator (kin-openapi), so that a test fails when an
// answer's status, headers or body is not what the document says.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/videngage/engagement/shared/errs"
)

var (
	once    sync.Once
	router  routers.Router
	loadErr error
)

// docPath is docs/openapi.yaml of this module, found from this file.
func docPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "openapi.yaml")
}

func load() (routers.Router, error) {
	once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile(docPath())
		if err != nil {
			loadErr = fmt.Errorf("apitest: %w", err)
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			loadErr = fmt.Errorf("apitest: docs/openapi.yaml: %w", err)
			return
		}
		// Routes are matched on the path alone: the document's server is a
		// template of each environment's domain.
		doc.Servers = nil
		router, loadErr = gorillamux.NewRouter(doc)
	})
	return router, loadErr
}

// Check validates one answer (status, headers, body) to the request with
// method and path (query included) against the document: the operation must
// exist, list the status, and the body must match its schema. A request the
// document has no operation for passes only when answered 404 (no such
// path), 405 (no such method) or as a CORS preflight. The document is the
// public API, every path of which starts /v1/: the routes outside it (the
// scheduled jobs' /internal/…, the push endpoints) are not checked.
func Check(method, path string, status int, header http.Header, body []byte) error {
	rt, err := load()
	if err != nil {
		return err
	}
	u, err := url.Parse(path)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(u.Path, publicPrefix) {
		return nil
	}
	req := (&http.Request{Method: method, URL: u, Header: http.Header{}}).WithContext(context.Background())
	route, params, err := rt.FindRoute(req)
	switch {
	case errors.Is(err, routers.ErrPathNotFound) && status == http.StatusNotFound,
		errors.Is(err, routers.ErrMethodNotAllowed) && (status == http.StatusMethodNotAllowed || method == http.MethodOptions):
		// The document has no operation to check the answer against, and
		// the answer says there is none (or is a CORS preflight).
		return nil
	case err != nil:
		return fmt.Errorf("apitest: %s %s answered %d: %w", method, path, status, err)
	}
	// The document's default answer covers what a client must expect, not
	// what the server may send: every status it sends is listed by name.
	if route.Operation.Responses.Value(strconv.Itoa(status)) == nil {
		return fmt.Errorf("apitest: %s %s answered %d, a status its operation does not list", method, path, status)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("apitest: %s %s answered %d: %w", method, path, status, err)
	}
	return nil
}

// publicPrefix starts every path of the document.
const publicPrefix = "/v1/"

// Answer is one answer of the API as a test reads it.
type Answer struct {
	Code   int
	Header http.Header
	Body   []byte
}

// Do sends req, reads the answer and checks it against the document (Check,
// with the request's path and query); a mismatch fails t, and so does a
// request that gets no answer.
func Do(t testing.TB, req *http.Request) Answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.RequestURI(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL.RequestURI(), err)
	}
	if err := Check(req.Method, req.URL.RequestURI(), resp.StatusCode, resp.Header, b); err != nil {
		t.Error(err)
	}
	return Answer{Code: resp.StatusCode, Header: resp.Header, Body: b}
}

// Request sends method to url with token as its bearer (none when "") and
// body — nil, a string or []byte sent as is, any other value as JSON — with
// the header name/value pairs in hdr (added, so a name may repeat) and
// Content-Type: application/json when there is a body and hdr names none,
// and checks the answer (Do).
func Request(t testing.TB, method, url, token string, body any, hdr ...string) Answer {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return Do(t, req)
}

// Want fails t at once unless the answer's status is code.
func (a Answer) Want(t testing.TB, code int, what string) Answer {
	t.Helper()
	if a.Code != code {
		t.Fatalf("%s: status %d, want %d; body %s", what, a.Code, code, a.Body)
	}
	return a
}

// CheckError checks the spec's error answer exactly: the status, JSON, and
// a body of one "error" object with exactly code, status, a non-empty
// message and details: an ErrorInfo of this service's domain with reason
// first, then at most a BadRequest with its field violations, then, on 429
// and 503 and only there, a RetryInfo whose delay is Retry-After's.
func CheckError(t testing.TB, what string, a Answer, code int, status string, reason errs.Reason) {
	t.Helper()
	if a.Code != code {
		t.Errorf("%s: status %d, want %d; body %s", what, a.Code, code, a.Body)
		return
	}
	if ct := a.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(a.Body, &outer); err != nil {
		t.Errorf("%s: body %s is not a JSON object: %v", what, a.Body, err)
		return
	}
	var inner map[string]json.RawMessage
	if len(outer) != 1 || json.Unmarshal(outer["error"], &inner) != nil {
		t.Errorf("%s: body %s is not {\"error\":{...}}", what, a.Body)
		return
	}
	keys := make([]string, 0, len(inner))
	for k := range inner {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"code", "details", "message", "status"}) {
		t.Errorf("%s: error fields %v, want exactly code, details, message, status: %s", what, keys, a.Body)
	}
	var e struct {
		Code    int              `json:"code"`
		Status  string           `json:"status"`
		Message string           `json:"message"`
		Details []map[string]any `json:"details"`
	}
	if err := json.Unmarshal(outer["error"], &e); err != nil {
		t.Errorf("%s: error %s: %v", what, outer["error"], err)
		return
	}
	if e.Code != code {
		t.Errorf("%s: error.code %v, want %d", what, e.Code, code)
	}
	if e.Status != status {
		t.Errorf("%s: error.status %q, want %q", what, e.Status, status)
	}
	if e.Message == "" {
		t.Errorf("%s: error.message empty, want a message", what)
	}
	checkDetails(t, what, a, e.Details, reason)
}

// The detail types of AIP-193.
const (
	typeErrorInfo  = "type.googleapis.com/google.rpc.ErrorInfo"
	typeBadRequest = "type.googleapis.com/google.rpc.BadRequest"
	typeRetryInfo  = "type.googleapis.com/google.rpc.RetryInfo"
)

func checkDetails(t testing.TB, what string, a Answer, details []map[string]any, reason errs.Reason) {
	t.Helper()
	if len(details) == 0 || details[0]["@type"] != typeErrorInfo {
		t.Errorf("%s: details %v, want an ErrorInfo first: %s", what, details, a.Body)
		return
	}
	if got := details[0]["reason"]; got != string(reason) {
		t.Errorf("%s: reason %v, want %s; body %s", what, got, reason, a.Body)
	}
	if got := details[0]["domain"]; got != errs.Domain {
		t.Errorf("%s: domain %v, want %s", what, got, errs.Domain)
	}
	rest := details[1:]
	if len(rest) > 0 && rest[0]["@type"] == typeBadRequest {
		if v, ok := rest[0]["fieldViolations"].([]any); !ok || len(v) == 0 {
			t.Errorf("%s: a BadRequest with no field violations: %s", what, a.Body)
		}
		rest = rest[1:]
	}
	retry := a.Code == http.StatusTooManyRequests || a.Code == http.StatusServiceUnavailable
	switch {
	case retry && (len(rest) != 1 || rest[0]["@type"] != typeRetryInfo):
		t.Errorf("%s: a %d with details %v, want a RetryInfo last", what, a.Code, details)
	case retry && rest[0]["retryDelay"] != a.Header.Get("Retry-After")+"s":
		t.Errorf("%s: RetryInfo.retryDelay %v, Retry-After %q: want the same delay", what, rest[0]["retryDelay"], a.Header.Get("Retry-After"))
	case !retry && len(rest) != 0:
		t.Errorf("%s: details %v after the ErrorInfo and BadRequest", what, rest)
	}
}

// ReasonOf is the ErrorInfo reason of an error body, or "" when it has
// none: for the answers outside the public API (the jobs', the push
// endpoints'), which Check does not see.
func ReasonOf(body []byte) errs.Reason {
	var e struct {
		Error struct {
			Details []struct {
				Type   string      `json:"@type"`
				Reason errs.Reason `json:"reason"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error.Details) == 0 || e.Error.Details[0].Type != typeErrorInfo {
		return ""
	}
	return e.Error.Details[0].Reason
}

// DecodeStrict decodes the JSON b into v, failing t at once on a field v
// does not have.
func DecodeStrict(t testing.TB, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
}
