// Package httpx is the HTTP plumbing every function shares: the spec's error
// body and status mapping (in one place), JSON decoding with the body limit,
// id validation, CORS, logging, panics and request deadlines.
package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/videngage/engagement/shared/errs"
)

// Error is an error the caller can act on. Handlers return it; WriteError
// turns it into the spec's error body.
type Error struct {
	Code       int
	Message    string
	RetryAfter time.Duration // 429 and 503
	Allow      []string      // 405
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, StatusName(e.Code), e.Message)
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

func newError(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidArgument is a 400: the message says what to fix.
func InvalidArgument(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, format, args...)
}

// Unauthenticated is a 401.
func Unauthenticated(format string, args ...any) *Error {
	return newError(http.StatusUnauthorized, format, args...)
}

// PermissionDenied is a 403.
func PermissionDenied(format string, args ...any) *Error {
	return newError(http.StatusForbidden, format, args...)
}

// NotFound is a 404.
func NotFound(format string, args ...any) *Error {
	return newError(http.StatusNotFound, format, args...)
}

// FailedPrecondition is a 412 (an If-Match that does not match).
func FailedPrecondition(format string, args ...any) *Error {
	return newError(http.StatusPreconditionFailed, format, args...)
}

// TooLarge is a 413.
func TooLarge(format string, args ...any) *Error {
	return newError(http.StatusRequestEntityTooLarge, format, args...)
}

// ResourceExhausted is a 429 with Retry-After.
func ResourceExhausted(retryAfter time.Duration, format string, args ...any) *Error {
	e := newError(http.StatusTooManyRequests, format, args...)
	e.RetryAfter = retryAfter
	return e
}

// Unavailable is a 503 with Retry-After: a backend is down, try again.
func Unavailable(retryAfter time.Duration, format string, args ...any) *Error {
	e := newError(http.StatusServiceUnavailable, format, args...)
	e.RetryAfter = retryAfter
	return e
}

// MethodNotAllowed is a 405 with the Allow header.
func MethodNotAllowed(allowed ...string) *Error {
	e := newError(http.StatusMethodNotAllowed, "method not allowed; use %s", strings.Join(allowed, ", "))
	e.Allow = allowed
	return e
}

const backendRetryAfter = 2 * time.Second

// AsError maps any error to the *Error the caller sees.
func AsError(err error) *Error {
	var e *Error
	var limited *errs.RateLimitedError
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &limited):
		return ResourceExhausted(limited.RetryAfter, "too many %s; retry after the time in Retry-After", limited.What)
	case errors.Is(err, errs.ErrMissingToken):
		return Unauthenticated("a bearer token is required: send Authorization: Bearer <ID token>")
	case errors.Is(err, errs.ErrKeysUnavailable):
		return Unavailable(backendRetryAfter, "the token keys cannot be fetched right now; retry shortly")
	case errors.Is(err, errs.ErrAccountErasing):
		return PermissionDenied("this account is being erased (DELETE /v1/me); it takes no new data until the erasure is done")
	case errors.Is(err, errs.ErrAccountNotAccepted):
		return Unauthenticated("this account cannot use the API: sign in with a supported method and verify your e-mail address")
	case errors.Is(err, errs.ErrInvalidToken):
		return Unauthenticated("the bearer token is invalid or expired; sign in again")
	case errors.Is(err, context.Canceled) && !errors.Is(err, errs.ErrBackendUnavailable):
		return Unavailable(backendRetryAfter, "the request was cancelled")
	case errs.Transient(err):
		return Unavailable(backendRetryAfter, "a backend is unavailable; retry shortly")
	}
	return newError(http.StatusInternalServerError, "internal error")
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    int    `json:"code"`
	Status  string `json:"status"`
	Message string `json:"message"`
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
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	if e.Code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	if len(e.Allow) > 0 {
		w.Header().Set("Allow", strings.Join(e.Allow, ", "))
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, e.Code, errorBody{Error: errorDetail{Code: e.Code, Status: StatusName(e.Code), Message: e.Message}})
}
