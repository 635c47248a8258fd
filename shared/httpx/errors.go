// Package httpx is the HTTP plumbing every function shares: the spec's error
// body and status mapping (in one place), JSON decoding with the body limit,
// id validation, CORS, logging, panics and request deadlines.
package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/videngage/engagement/shared/errs"
)

// Error is an error the caller can act on. Handlers return it; WriteError
// turns it into the spec's error body, with the AIP-193 details: an ErrorInfo
// with the Reason, a BadRequest field violation when Field names the request
// field at fault, and RetryInfo beside Retry-After.
type Error struct {
	Code       int
	Reason     errs.Reason
	Message    string
	Field      string            // the request field at fault, if any
	Metadata   map[string]string // the ErrorInfo's metadata
	RetryAfter time.Duration     // 429 and 503
	Allow      []string          // 405
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s %s: %s", e.Code, StatusName(e.Code), e.Reason, e.Message)
}

// With returns e with the metadata key set to value.
func (e *Error) With(key, value string) *Error {
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	e.Metadata[key] = value
	return e
}

// StatusName is Google's canonical status name for an HTTP status.
func StatusName(code int) string {
	switch code {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusPreconditionFailed:
		return "FAILED_PRECONDITION"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return "UNAVAILABLE"
	default:
		return "INTERNAL"
	}
}

func newError(code int, reason errs.Reason, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// InvalidArgument is a 400: the message says what to fix.
func InvalidArgument(reason errs.Reason, format string, args ...any) *Error {
	return newError(http.StatusBadRequest, reason, format, args...)
}

// InvalidField is a 400 about one field of the request (a body field, a
// query parameter, a path segment or a header, by its name): the answer
// carries it as a BadRequest field violation.
func InvalidField(reason errs.Reason, field, format string, args ...any) *Error {
	e := newError(http.StatusBadRequest, reason, format, args...)
	e.Field = field
	return e
}

// Unauthenticated is a 401.
func Unauthenticated(reason errs.Reason, format string, args ...any) *Error {
	return newError(http.StatusUnauthorized, reason, format, args...)
}

// PermissionDenied is a 403.
func PermissionDenied(reason errs.Reason, format string, args ...any) *Error {
	return newError(http.StatusForbidden, reason, format, args...)
}

// NotFound is a 404.
func NotFound(reason errs.Reason, format string, args ...any) *Error {
	return newError(http.StatusNotFound, reason, format, args...)
}

// FailedPrecondition is a 412 (an If-Match that does not match).
func FailedPrecondition(reason errs.Reason, format string, args ...any) *Error {
	return newError(http.StatusPreconditionFailed, reason, format, args...)
}

// TooLarge is a 413 for a body over max bytes.
func TooLarge(max int) *Error {
	return newError(http.StatusRequestEntityTooLarge, errs.BodyTooLarge, "the body is larger than %d bytes", max).
		With("maxBytes", strconv.Itoa(max))
}

// ResourceExhausted is a 429 with Retry-After.
func ResourceExhausted(reason errs.Reason, retryAfter time.Duration, format string, args ...any) *Error {
	e := newError(http.StatusTooManyRequests, reason, format, args...)
	e.RetryAfter = retryAfter
	return e
}

// Unavailable is a 503 with Retry-After: a backend is down, try again.
func Unavailable(reason errs.Reason, retryAfter time.Duration, format string, args ...any) *Error {
	e := newError(http.StatusServiceUnavailable, reason, format, args...)
	e.RetryAfter = retryAfter
	return e
}

// MethodNotAllowed is a 405 with the Allow header.
func MethodNotAllowed(allowed ...string) *Error {
	e := newError(http.StatusMethodNotAllowed, errs.MethodNotAllowed, "method not allowed; use %s", strings.Join(allowed, ", "))
	e.Allow = allowed
	return e.With("allow", strings.Join(allowed, ", "))
}

// reasonStatus is the HTTP status of each reason, for the refusals domains
// make (*errs.Error), which know no HTTP.
var reasonStatus = map[errs.Reason]int{
	errs.InvalidQuery:         http.StatusBadRequest,
	errs.RepeatedParameter:    http.StatusBadRequest,
	errs.InvalidJSON:          http.StatusBadRequest,
	errs.UnknownField:         http.StatusBadRequest,
	errs.WrongFieldType:       http.StatusBadRequest,
	errs.MissingField:         http.StatusBadRequest,
	errs.InvalidID:            http.StatusBadRequest,
	errs.InvalidValue:         http.StatusBadRequest,
	errs.InvalidPageToken:     http.StatusBadRequest,
	errs.InvalidSession:       http.StatusBadRequest,
	errs.BodyTooLarge:         http.StatusRequestEntityTooLarge,
	errs.MethodNotAllowed:     http.StatusMethodNotAllowed,
	errs.UnknownPath:          http.StatusNotFound,
	errs.TokenMissing:         http.StatusUnauthorized,
	errs.TokenInvalid:         http.StatusUnauthorized,
	errs.TokenExpired:         http.StatusUnauthorized,
	errs.AccountNotAccepted:   http.StatusUnauthorized,
	errs.AccountErasing:       http.StatusForbidden,
	errs.NotModerator:         http.StatusForbidden,
	errs.ModeratorRevoked:     http.StatusForbidden,
	errs.NotAuthor:            http.StatusForbidden,
	errs.OriginNotAllowed:     http.StatusForbidden,
	errs.StaleVersion:         http.StatusPreconditionFailed,
	errs.TooManyLinks:         http.StatusBadRequest,
	errs.YoungAccountLinks:    http.StatusBadRequest,
	errs.DuplicateComment:     http.StatusBadRequest,
	errs.IdempotencyKeyReused: http.StatusBadRequest,
	errs.CommentNotFound:      http.StatusNotFound,
	errs.ParentNotFound:       http.StatusNotFound,
	errs.ParentIsReply:        http.StatusBadRequest,
	errs.ParentOnOtherVideo:   http.StatusBadRequest,
	errs.RateLimited:          http.StatusTooManyRequests,
	errs.BackendUnavailable:   http.StatusServiceUnavailable,
	errs.AuthKeysUnavailable:  http.StatusServiceUnavailable,
	errs.RequestCancelled:     http.StatusServiceUnavailable,
	errs.Internal:             http.StatusInternalServerError,
	errs.InvalidMessage:       http.StatusBadRequest,
}

const backendRetryAfter = 2 * time.Second

// AsError maps any error to the *Error the caller sees.
func AsError(err error) *Error {
	var e *Error
	var refusal *errs.Error
	var limited *errs.RateLimitedError
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &refusal):
		code, ok := reasonStatus[refusal.Reason]
		if !ok {
			break
		}
		// A copy of the metadata: the refusal is often a shared sentinel.
		return &Error{Code: code, Reason: refusal.Reason, Message: refusal.Message, Field: refusal.Field, Metadata: maps.Clone(refusal.Metadata)}
	case errors.As(err, &limited):
		return ResourceExhausted(errs.RateLimited, limited.RetryAfter, "too many %s; retry after the time in Retry-After", limited.What).
			With("limit", limited.What)
	case errors.Is(err, errs.ErrMissingToken):
		return Unauthenticated(errs.TokenMissing, "a bearer token is required: send Authorization: Bearer <ID token>")
	case errors.Is(err, errs.ErrKeysUnavailable):
		return Unavailable(errs.AuthKeysUnavailable, backendRetryAfter, "the token keys cannot be fetched right now; retry shortly")
	case errors.Is(err, errs.ErrAccountErasing):
		return PermissionDenied(errs.AccountErasing, "this account is being erased (DELETE /v1/me); it takes no new data until the erasure is done")
	case errors.Is(err, errs.ErrAccountNotAccepted):
		return Unauthenticated(errs.AccountNotAccepted, "this account cannot use the API: sign in with a supported method and verify your e-mail address")
	case errors.Is(err, errs.ErrTokenExpired):
		return Unauthenticated(errs.TokenExpired, "the bearer token has expired; get a fresh one and retry")
	case errors.Is(err, errs.ErrInvalidToken):
		return Unauthenticated(errs.TokenInvalid, "the bearer token is invalid or expired; sign in again")
	case errors.Is(err, context.Canceled) && !errors.Is(err, errs.ErrBackendUnavailable):
		return Unavailable(errs.RequestCancelled, backendRetryAfter, "the request was cancelled")
	case errs.Transient(err):
		return Unavailable(errs.BackendUnavailable, backendRetryAfter, "a backend is unavailable; retry shortly")
	}
	return newError(http.StatusInternalServerError, errs.Internal, "internal error")
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    int    `json:"code"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

// The detail types of AIP-193, in their JSON form.
const (
	typeErrorInfo  = "type.googleapis.com/google.rpc.ErrorInfo"
	typeBadRequest = "type.googleapis.com/google.rpc.BadRequest"
	typeRetryInfo  = "type.googleapis.com/google.rpc.RetryInfo"
)

type errorInfo struct {
	Type     string            `json:"@type"`
	Reason   errs.Reason       `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type badRequest struct {
	Type            string           `json:"@type"`
	FieldViolations []fieldViolation `json:"fieldViolations"`
}

type fieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

type retryInfo struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"`
}

// retrySeconds is Retry-After's whole seconds: the delay rounded up.
func retrySeconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// details are e's AIP-193 details: the ErrorInfo always, then a BadRequest
// for a field at fault, then RetryInfo with Retry-After's delay.
func (e *Error) details() []any {
	d := []any{errorInfo{Type: typeErrorInfo, Reason: e.Reason, Domain: errs.Domain, Metadata: e.Metadata}}
	if e.Field != "" {
		d = append(d, badRequest{Type: typeBadRequest, FieldViolations: []fieldViolation{{Field: e.Field, Description: e.Message}}})
	}
	if e.RetryAfter > 0 {
		d = append(d, retryInfo{Type: typeRetryInfo, RetryDelay: strconv.Itoa(retrySeconds(e.RetryAfter)) + "s"})
	}
	return d
}

// WriteError writes err as the spec's error body. Internal errors are logged
// with their detail and answered with a message that leaks nothing.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := AsError(err)
	switch {
	case e.Code == http.StatusInternalServerError:
		slog.ErrorContext(r.Context(), "request failed", "error", err.Error(), "method", r.Method, "path", r.URL.Path)
	case e.Code >= 500:
		slog.WarnContext(r.Context(), "backend unavailable", "error", err.Error(), "method", r.Method, "path", r.URL.Path)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(e.RetryAfter)))
	}
	if e.Code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	if len(e.Allow) > 0 {
		w.Header().Set("Allow", strings.Join(e.Allow, ", "))
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, e.Code, errorBody{Error: errorDetail{Code: e.Code, Status: StatusName(e.Code), Message: e.Message, Details: e.details()}})
}
