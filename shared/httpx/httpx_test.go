package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/telemetry"
)

type wantErr struct {
	code       int
	status     string
	reason     errs.Reason
	message    string
	retryAfter string
	field      string // the BadRequest field violation's field, if any
}

func checkError(t *testing.T, rec *httptest.ResponseRecorder, want wantErr) {
	t.Helper()
	if rec.Code != want.code {
		t.Errorf("status = %d, want %d (body %s)", rec.Code, want.code, rec.Body)
	}
	type detail struct {
		Type            string            `json:"@type"`
		Reason          errs.Reason       `json:"reason"`
		Domain          string            `json:"domain"`
		Metadata        map[string]string `json:"metadata"`
		FieldViolations []struct {
			Field       string `json:"field"`
			Description string `json:"description"`
		} `json:"fieldViolations"`
		RetryDelay string `json:"retryDelay"`
	}
	var body struct {
		Error struct {
			Code    int      `json:"code"`
			Status  string   `json:"status"`
			Message string   `json:"message"`
			Details []detail `json:"details"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("body %q is not the error shape: %v", rec.Body, err)
	}
	if body.Error.Code != want.code || body.Error.Status != want.status {
		t.Errorf("error = %d %s, want %d %s", body.Error.Code, body.Error.Status, want.code, want.status)
	}
	if want.message != "" && body.Error.Message != want.message {
		t.Errorf("message = %q, want %q", body.Error.Message, want.message)
	}
	if got := rec.Header().Get("Retry-After"); got != want.retryAfter {
		t.Errorf("Retry-After = %q, want %q", got, want.retryAfter)
	}
	// The details: ErrorInfo first, then BadRequest for a field, then
	// RetryInfo with Retry-After's delay.
	wantTypes := []string{typeErrorInfo}
	if want.field != "" {
		wantTypes = append(wantTypes, typeBadRequest)
	}
	if want.retryAfter != "" {
		wantTypes = append(wantTypes, typeRetryInfo)
	}
	var types []string
	for _, d := range body.Error.Details {
		types = append(types, d.Type)
	}
	if !cmp.Equal(types, wantTypes) {
		t.Fatalf("details %v, want %v: %s", types, wantTypes, rec.Body)
	}
	info := body.Error.Details[0]
	if info.Reason != want.reason || info.Domain != errs.Domain {
		t.Errorf("ErrorInfo reason %q domain %q, want %q %q", info.Reason, info.Domain, want.reason, errs.Domain)
	}
	if want.field != "" {
		v := body.Error.Details[1].FieldViolations
		if len(v) != 1 || v[0].Field != want.field || v[0].Description != body.Error.Message {
			t.Errorf("field violations %+v, want one of %q described by the message", v, want.field)
		}
	}
	if want.retryAfter != "" {
		if got := body.Error.Details[len(body.Error.Details)-1].RetryDelay; got != want.retryAfter+"s" {
			t.Errorf("RetryInfo.retryDelay = %q, want %q", got, want.retryAfter+"s")
		}
	}
}

func TestWriteErrorMapping(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want wantErr
	}{
		{"invalid", InvalidArgument(errs.InvalidJSON, "bad %s", "x"), wantErr{400, "INVALID_ARGUMENT", errs.InvalidJSON, "bad x", "", ""}},
		{"invalid field", InvalidField(errs.InvalidValue, "n", "bad n"), wantErr{400, "INVALID_ARGUMENT", errs.InvalidValue, "bad n", "", "n"}},
		{"not found", NotFound(errs.CommentNotFound, "no"), wantErr{404, "NOT_FOUND", errs.CommentNotFound, "no", "", ""}},
		{"forbidden", PermissionDenied(errs.NotAuthor, "no"), wantErr{403, "PERMISSION_DENIED", errs.NotAuthor, "no", "", ""}},
		{"precondition", FailedPrecondition(errs.StaleVersion, "stale"), wantErr{412, "FAILED_PRECONDITION", errs.StaleVersion, "stale", "", ""}},
		{"too large", TooLarge(10), wantErr{413, "INVALID_ARGUMENT", errs.BodyTooLarge, "the body is larger than 10 bytes", "", ""}},
		{"rate limited", ResourceExhausted(errs.RateLimited, 1500*time.Millisecond, "slow"), wantErr{429, "RESOURCE_EXHAUSTED", errs.RateLimited, "slow", "2", ""}},
		{"over a rate", fmt.Errorf("set: %w", &errs.RateLimitedError{What: "reactions", RetryAfter: 2500 * time.Millisecond}), wantErr{429, "RESOURCE_EXHAUSTED", errs.RateLimited, "too many reactions; retry after the time in Retry-After", "3", ""}},
		{"wrapped api error", fmt.Errorf("op: %w", NotFound(errs.CommentNotFound, "gone")), wantErr{404, "NOT_FOUND", errs.CommentNotFound, "gone", "", ""}},
		{"refusal", fmt.Errorf("post: %w", errs.New(errs.DuplicateComment, "text", "said it")), wantErr{400, "INVALID_ARGUMENT", errs.DuplicateComment, "said it", "", "text"}},
		{"refusal without a field", errs.New(errs.NotAuthor, "", "not yours"), wantErr{403, "PERMISSION_DENIED", errs.NotAuthor, "not yours", "", ""}},
		{"missing token", fmt.Errorf("x: %w", errs.ErrMissingToken), wantErr{401, "UNAUTHENTICATED", errs.TokenMissing, "", "", ""}},
		{"invalid token", fmt.Errorf("x: %w", errs.ErrInvalidToken), wantErr{401, "UNAUTHENTICATED", errs.TokenInvalid, "the bearer token is invalid or expired; sign in again", "", ""}},
		{"expired token", fmt.Errorf("x: %w: %w", errs.ErrInvalidToken, errs.ErrTokenExpired), wantErr{401, "UNAUTHENTICATED", errs.TokenExpired, "the bearer token has expired; get a fresh one and retry", "", ""}},
		{"account not accepted", fmt.Errorf("x: %w: %w", errs.ErrInvalidToken, errs.ErrAccountNotAccepted), wantErr{401, "UNAUTHENTICATED", errs.AccountNotAccepted, "this account cannot use the API: sign in with a supported method and verify your e-mail address", "", ""}},
		{"erasing", fmt.Errorf("set: %w", errs.ErrAccountErasing), wantErr{403, "PERMISSION_DENIED", errs.AccountErasing, "", "", ""}},
		{"keys down", errs.ErrKeysUnavailable, wantErr{503, "UNAVAILABLE", errs.AuthKeysUnavailable, "", "2", ""}},
		{"backend", fmt.Errorf("%w: spanner", errs.ErrBackendUnavailable), wantErr{503, "UNAVAILABLE", errs.BackendUnavailable, "a backend is unavailable; retry shortly", "2", ""}},
		{"grpc unavailable", status.Error(codes.Unavailable, "conn refused"), wantErr{503, "UNAVAILABLE", errs.BackendUnavailable, "", "2", ""}},
		{"wrapped grpc deadline", fmt.Errorf("read: %w", status.Error(codes.DeadlineExceeded, "slow")), wantErr{503, "UNAVAILABLE", errs.BackendUnavailable, "", "2", ""}},
		{"context deadline", context.DeadlineExceeded, wantErr{503, "UNAVAILABLE", errs.BackendUnavailable, "", "2", ""}},
		{"cancelled", context.Canceled, wantErr{503, "UNAVAILABLE", errs.RequestCancelled, "the request was cancelled", "2", ""}},
		{"bug", errors.New("nil map write at spanner row 7"), wantErr{500, "INTERNAL", errs.Internal, "internal error", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteError(rec, httptest.NewRequest("GET", "/", nil), tt.err)
			checkError(t, rec, tt.want)
			if strings.Contains(rec.Body.String(), "spanner") || strings.Contains(rec.Body.String(), "conn refused") {
				t.Errorf("body leaks internals: %s", rec.Body)
			}
		})
	}
}

func TestUnauthenticatedSaysBearer(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest("GET", "/", nil), errs.ErrMissingToken)
	if got := rec.Header().Get("WWW-Authenticate"); got != "Bearer" {
		t.Errorf("WWW-Authenticate = %q", got)
	}
}

type sample struct {
	VideoID string `json:"videoId"`
	N       *int   `json:"n"`
}

func TestDecodeJSON(t *testing.T) {
	big := `{"videoId":"` + strings.Repeat("a", MaxBodyBytes) + `"}`
	tests := []struct {
		name string
		body string
		want wantErr // code 0: success
	}{
		{"ok", `{"videoId":"v1","n":3}`, wantErr{}},
		{"ok with spaces", " {\"videoId\":\"v1\"} \n", wantErr{}},
		{"empty", ``, wantErr{400, "INVALID_ARGUMENT", errs.InvalidJSON, "the body is empty; send a JSON object", "", ""}},
		{"malformed", `{"videoId":`, wantErr{400, "INVALID_ARGUMENT", errs.InvalidJSON, "the body is not valid JSON", "", ""}},
		{"syntax", `{videoId:1}`, wantErr{400, "INVALID_ARGUMENT", errs.InvalidJSON, "the body is not valid JSON", "", ""}},
		{"unknown field", `{"videoId":"v","userId":"mallory"}`, wantErr{400, "INVALID_ARGUMENT", errs.UnknownField, `unknown field "userId"`, "", "userId"}},
		{"wrong type", `{"videoId":5}`, wantErr{400, "INVALID_ARGUMENT", errs.WrongFieldType, `field "videoId" must be a JSON string`, "", "videoId"}},
		{"wrong number type", `{"n":"5"}`, wantErr{400, "INVALID_ARGUMENT", errs.WrongFieldType, `field "n" must be a JSON number`, "", "n"}},
		{"not an object", `[1]`, wantErr{400, "INVALID_ARGUMENT", errs.InvalidJSON, "the body must be a JSON object", "", ""}},
		{"two objects", `{"videoId":"a"}{"videoId":"b"}`, wantErr{400, "INVALID_ARGUMENT", errs.InvalidJSON, "the body must hold exactly one JSON object", "", ""}},
		{"too large", big, wantErr{413, "INVALID_ARGUMENT", errs.BodyTooLarge, "the body is larger than 65536 bytes", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/", strings.NewReader(tt.body))
			var v sample
			err := DecodeJSON(rec, req, &v)
			if tt.want.code == 0 {
				if err != nil || v.VideoID != "v1" {
					t.Fatalf("DecodeJSON = %v, %+v", err, v)
				}
				return
			}
			if err == nil {
				t.Fatalf("DecodeJSON accepted %q", tt.body)
			}
			WriteError(rec, req, err)
			checkError(t, rec, tt.want)
		})
	}
}

func TestIDs(t *testing.T) {
	for _, ok := range []string{"a", "A-z_0", strings.Repeat("x", 64)} {
		if !ValidID(ok) {
			t.Errorf("ValidID(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 65), "a b", "a/b", "é", "a,b", "a\n"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
	got, err := ParseIDs("b,a,b,c", 3)
	if err != nil || !cmp.Equal(got, []string{"b", "a", "c"}) {
		t.Errorf("ParseIDs = %v, %v", got, err)
	}
	if _, err := ParseIDs("a,b,c,d", 3); err == nil {
		t.Error("ParseIDs accepted 4 distinct ids with max 3")
	}
	if got, err := ParseIDs("a,a,a,a", 3); err != nil || len(got) != 1 {
		t.Errorf("duplicates collapse before the limit: %v, %v", got, err)
	}
	for _, bad := range []string{"", "a,,b", "a,b c", ","} {
		if _, err := ParseIDs(bad, 50); err == nil {
			t.Errorf("ParseIDs(%q) accepted", bad)
		}
	}
}

func TestParsePageSize(t *testing.T) {
	for q, want := range map[string]int{"": 20, "1": 1, "100": 100, "37": 37} {
		if got, err := ParsePageSize(q, 20, 100); err != nil || got != want {
			t.Errorf("ParsePageSize(%q) = %d, %v; want %d", q, got, err, want)
		}
	}
	for _, bad := range []string{"0", "101", "-1", "abc", "5x", "1.5", " 5"} {
		if _, err := ParsePageSize(bad, 20, 100); err == nil {
			t.Errorf("ParsePageSize(%q) accepted", bad)
		}
	}
}

func TestRouter(t *testing.T) {
	rt := NewRouter()
	rt.Handle("GET /v1/things/{id}", func(w http.ResponseWriter, r *http.Request) error {
		WriteJSON(w, 200, map[string]string{"id": r.PathValue("id")})
		return nil
	})
	rt.Handle("DELETE /v1/things/{id}", func(w http.ResponseWriter, r *http.Request) error {
		return NotFound(errs.CommentNotFound, "no thing %s", r.PathValue("id"))
	})
	// Mounted under an outer mux, as the local runner and the gateway do.
	outer := http.NewServeMux()
	outer.Handle("/v1/things/", rt)

	rec := httptest.NewRecorder()
	outer.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/things/x1", nil))
	if rec.Code != 200 || rec.Body.String() != "{\"id\":\"x1\"}\n" {
		t.Errorf("GET = %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	outer.ServeHTTP(rec, httptest.NewRequest("DELETE", "/v1/things/x2", nil))
	checkError(t, rec, wantErr{404, "NOT_FOUND", errs.CommentNotFound, "no thing x2", "", ""})
	rec = httptest.NewRecorder()
	outer.ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/things/x3", nil))
	checkError(t, rec, wantErr{405, "INVALID_ARGUMENT", errs.MethodNotAllowed, "", "", ""})
	if got := rec.Header().Get("Allow"); got != "DELETE, GET, HEAD" {
		t.Errorf("Allow = %q", got)
	}
	rec = httptest.NewRecorder()
	outer.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/things/a/b", nil))
	checkError(t, rec, wantErr{404, "NOT_FOUND", errs.UnknownPath, "no such resource: /v1/things/a/b", "", ""})
}

func TestCORS(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })
	tests := []struct {
		name        string
		allowed     []string
		method      string
		origin      string
		preflight   bool
		wantCode    int
		wantAllowed string
	}{
		{"no origin passes through", nil, "GET", "", false, 299, ""},
		{"none allowed: no CORS headers", nil, "GET", "https://a.example", false, 299, ""},
		{"listed origin", []string{"https://a.example"}, "GET", "https://a.example", false, 299, "https://a.example"},
		{"unlisted origin", []string{"https://a.example"}, "GET", "https://b.example", false, 299, ""},
		{"any origin", []string{"*"}, "GET", "https://b.example", false, 299, "*"},
		{"preflight listed", []string{"https://a.example"}, "OPTIONS", "https://a.example", true, 204, "https://a.example"},
		{"preflight refused", []string{"https://a.example"}, "OPTIONS", "https://b.example", true, 403, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "/v1/x", nil)
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.preflight {
				req.Header.Set("Access-Control-Request-Method", "PUT")
			}
			rec := httptest.NewRecorder()
			CORS(tt.allowed)(next).ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Errorf("status = %d, want %d", rec.Code, tt.wantCode)
			}
			if got := rec.Header().Get("Access-Control-Allow-Origin"); got != tt.wantAllowed {
				t.Errorf("Allow-Origin = %q, want %q", got, tt.wantAllowed)
			}
			if tt.wantAllowed != "" {
				if got := rec.Header().Get("Access-Control-Expose-Headers"); got != "ETag, Retry-After, Session-Token" {
					t.Errorf("Expose-Headers = %q", got)
				}
			}
			if tt.preflight && tt.wantCode == 204 {
				if got := rec.Header().Get("Access-Control-Allow-Headers"); got != "Authorization, If-Match, Idempotency-Key, Content-Type, Session-Token" {
					t.Errorf("Allow-Headers = %q", got)
				}
			}
		})
	}
}

func TestRecoverAnswers500(t *testing.T) {
	h := Recover(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	checkError(t, rec, wantErr{500, "INTERNAL", errs.Internal, "internal error", "", ""})
}

func TestTimeoutBoundsTheContext(t *testing.T) {
	var deadline time.Time
	h := Timeout(50 * time.Millisecond)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline, _ = r.Context().Deadline()
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if d := time.Until(deadline); deadline.IsZero() || d > 50*time.Millisecond {
		t.Errorf("deadline %v not within 50ms", deadline)
	}
}

func TestLogLinesCarryCloudLoggingFields(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(&buf, slog.LevelInfo, "proj"))
	ctx := requestContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")
	log.WarnContext(ctx, "hello", "k", 1)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %q", buf.String())
	}
	want := map[string]any{
		"severity":                             "WARNING",
		"message":                              "hello",
		"k":                                    float64(1),
		"logging.googleapis.com/trace":         "projects/proj/traces/0af7651916cd43dd8448eb211c80319c",
		"logging.googleapis.com/spanId":        "b7ad6b7169203331",
		"logging.googleapis.com/trace_sampled": true,
	}
	delete(line, "time")
	if diff := cmp.Diff(want, line); diff != "" {
		t.Errorf("log line (-want +got):\n%s", diff)
	}
	buf.Reset()
	ctx = requestContext("", "105445aa7843bc8bf206b12000100000/1;o=0")
	log.InfoContext(ctx, "x")
	if !strings.Contains(buf.String(), `"logging.googleapis.com/trace":"projects/proj/traces/105445aa7843bc8bf206b12000100000"`) {
		t.Errorf("X-Cloud-Trace-Context not used: %s", buf.String())
	}
}

// traced is a request's trace context as the functions get it:
// telemetry.Middleware continues the incoming headers' trace. No tracer
// provider is installed in these tests, so the request's span is the
// caller's (its ids are the headers').
var traced = telemetry.Middleware(nil)

// requestContext is the context a handler sees for a request with these
// trace headers (either may be empty).
func requestContext(traceparent, cloudTrace string) context.Context {
	r := httptest.NewRequest("GET", "/", nil)
	if traceparent != "" {
		r.Header.Set("traceparent", traceparent)
	}
	if cloudTrace != "" {
		r.Header.Set("X-Cloud-Trace-Context", cloudTrace)
	}
	var ctx context.Context
	traced(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { ctx = r.Context() })).ServeHTTP(httptest.NewRecorder(), r)
	return ctx
}

func TestStandardSetsSecurityHeaders(t *testing.T) {
	rt := NewRouter()
	rt.Handle("GET /v1/ok", func(w http.ResponseWriter, r *http.Request) error {
		WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
		return nil
	})
	rt.Handle("GET /v1/panic", func(w http.ResponseWriter, r *http.Request) error { panic("boom") })
	h := Standard("Test", "p", nil, time.Second)(rt)
	for _, path := range []string{"/v1/ok", "/v1/panic", "/v1/nowhere", "/v1/ok?a=%zz"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if got := rec.Header().Get("Strict-Transport-Security"); !strings.HasPrefix(got, "max-age=") {
			t.Errorf("GET %s (%d): Strict-Transport-Security = %q", path, rec.Code, got)
		}
		if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s (%d): X-Content-Type-Options = %q", path, rec.Code, got)
		}
	}
}

func TestStandardRefusesAQueryThatDoesNotParse(t *testing.T) {
	rt := NewRouter()
	rt.Handle("GET /v1/things", func(w http.ResponseWriter, r *http.Request) error {
		WriteJSON(w, http.StatusOK, map[string]string{"pageToken": r.URL.Query().Get("pageToken")})
		return nil
	})
	h := Standard("Test", "p", nil, time.Second)(rt)
	for _, q := range []string{"pageToken=%%%%", "pageSize=2&pageToken=%zz", "%=1", "a=%2"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/things?"+q, nil))
		checkError(t, rec, wantErr{400, "INVALID_ARGUMENT", errs.InvalidQuery, "the query string is not valid: percent-encode its names and values", "", ""})
	}
	for _, q := range []string{"", "pageToken=a%25b", "pageToken=&x=1", "a=b;c"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/things?"+q, nil))
		if q == "a=b;c" {
			// A semicolon is refused by url.ParseQuery, as by the Go server.
			checkError(t, rec, wantErr{400, "INVALID_ARGUMENT", errs.InvalidQuery, "the query string is not valid: percent-encode its names and values", "", ""})
			continue
		}
		if rec.Code != http.StatusOK {
			t.Errorf("?%s = %d %s, want 200", q, rec.Code, rec.Body)
		}
	}
}

func TestStandardRefusesARepeatedParameter(t *testing.T) {
	rt := NewRouter()
	rt.Handle("GET /v1/things", func(w http.ResponseWriter, r *http.Request) error {
		WriteJSON(w, http.StatusOK, map[string]string{"ids": r.URL.Query().Get("ids")})
		return nil
	})
	h := Standard("Test", "p", nil, time.Second)(rt)
	for _, tc := range []struct{ query, field, message string }{
		{"ids=a&ids=b", "ids", `the query parameter "ids" is sent 2 times; send it once (a list is one comma-separated value, such as ids=a,b)`},
		{"pageSize=2&pageToken=x&pageSize=2", "pageSize", ""},
		{"ids=a&ids=a&ids=a", "ids", `the query parameter "ids" is sent 3 times; send it once (a list is one comma-separated value, such as ids=a,b)`},
		{"zz=1&zz=2&b=1&b=2", "b", ""}, // the first by name, whatever the order
		{"unknown=1&unknown=", "unknown", ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/things?"+tc.query, nil))
		checkError(t, rec, wantErr{400, "INVALID_ARGUMENT", errs.RepeatedParameter, tc.message, "", tc.field})
	}
	// Each parameter once, and parameters no route takes: answered.
	for _, q := range []string{"ids=a,b", "ids=a&pageSize=2", "ids=a&unknown=1"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/things?"+q, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("?%s = %d %s, want 200", q, rec.Code, rec.Body)
		}
	}
}

func TestErrorInfoMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want map[string]string
	}{
		{"rate", &errs.RateLimitedError{What: "reactions", RetryAfter: time.Second}, map[string]string{"limit": "reactions"}},
		{"too large", TooLarge(MaxBodyBytes), map[string]string{"maxBytes": "65536"}},
		{"method", MethodNotAllowed("GET", "POST"), map[string]string{"allow": "GET, POST"}},
		{"ids", func() error { _, err := ParseIDs("a,b,c", 2); return err }(), map[string]string{"maxIds": "2"}},
		{"refusal", fmt.Errorf("post: %w", &errs.Error{Reason: errs.TooManyLinks, Field: "text", Message: "m", Metadata: map[string]string{"maxLinks": "2"}}), map[string]string{"maxLinks": "2"}},
		{"none", NotFound(errs.CommentNotFound, "no"), nil},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, httptest.NewRequest("GET", "/", nil), tc.err)
		var body struct {
			Error struct {
				Details []struct {
					Metadata map[string]string `json:"metadata"`
				} `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Error.Details) == 0 {
			t.Fatalf("%s: body %s: %v", tc.name, rec.Body, err)
		}
		if diff := cmp.Diff(tc.want, body.Error.Details[0].Metadata); diff != "" {
			t.Errorf("%s: metadata (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestEveryReasonHasAStatus(t *testing.T) {
	seen := map[errs.Reason]bool{}
	for _, r := range errs.Reasons {
		if seen[r] {
			t.Errorf("reason %s listed twice", r)
		}
		seen[r] = true
		code, ok := reasonStatus[r]
		if !ok {
			t.Errorf("reason %s has no status", r)
			continue
		}
		rec := httptest.NewRecorder()
		WriteError(rec, httptest.NewRequest("GET", "/", nil), errs.New(r, "", "refused"))
		if rec.Code != code {
			t.Errorf("a refusal of reason %s answered %d, want %d", r, rec.Code, code)
		}
	}
	for r := range reasonStatus {
		if !seen[r] {
			t.Errorf("reason %s has a status but is not in errs.Reasons", r)
		}
	}
}

func TestServeMuxAnswersErrorBodies(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	h := ServeMux(mux)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /healthz = %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/no/such/thing", nil))
	checkError(t, rec, wantErr{404, "NOT_FOUND", errs.UnknownPath, "no such resource: /no/such/thing", "", ""})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/healthz", nil))
	checkError(t, rec, wantErr{405, "INVALID_ARGUMENT", errs.MethodNotAllowed, "", "", ""})
	if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("Allow = %q", got)
	}
}
