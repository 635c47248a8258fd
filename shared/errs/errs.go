// Package errs holds the sentinel errors every layer shares and the one rule
// for which backend failures are worth a retry. It imports nothing of this
// module: adapters wrap these sentinels, httpx maps them to HTTP answers, and
// neither needs the other.
//
// The wrapping rule: an error is wrapped with %w, never flattened with %v,
// so that errors.Is and errors.As see both the sentinel that decides the
// answer and the cause beneath it. A failed backend call is wrapped with
// Backend (transient or not, decided by Transient); a failure that must be
// retried whatever its cause (a publish, a redelivery) with Unavailable; a
// refusal with its sentinel first: fmt.Errorf("%w: detail: %w", sentinel, err).
package errs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrBackendUnavailable marks an error from a store or the bus that a retry
// may cure (503 with Retry-After).
var ErrBackendUnavailable = errors.New("backend unavailable")

// ErrAccountErasing refuses a write of a user whose account erasure
// (DELETE /v1/me) is under way (403): nothing written then could be left
// behind by the erasure, half erased.
var ErrAccountErasing = errors.New("the account is being erased")

// RateLimitedError refuses a write over its caller's rate (429 with
// Retry-After): What names the writes ("reactions", "comments") in the
// answer, RetryAfter is how long until one more is allowed.
type RateLimitedError struct {
	What       string
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many %s; retry in %v", e.What, e.RetryAfter)
}

// The errors auth.Verify and auth.FromRequest return wrap exactly one of
// these. Their text carries detail for logs; callers answer with a fixed
// message.
var (
	// ErrMissingToken: no Authorization header, or not a Bearer token (401).
	ErrMissingToken = errors.New("auth: missing bearer token")
	// ErrInvalidToken: a token was presented but is not acceptable (401).
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrKeysUnavailable: the signing keys could not be fetched, so the token
	// could be neither accepted nor rejected (503, retry later).
	ErrKeysUnavailable = errors.New("auth: signing keys unavailable")
)

// ErrTokenExpired comes with ErrInvalidToken when the token was valid but
// has expired (401): the client gets a fresh token and retries.
var ErrTokenExpired = errors.New("auth: token expired")

// ErrAccountNotAccepted marks a valid token of an account this service does
// not take (sign-in provider not accepted, e-mail address not verified,
// another tenant); it always comes with ErrInvalidToken (401), so that callers
// that know only the three above answer it rightly.
var ErrAccountNotAccepted = errors.New("auth: account not accepted")

// Transient reports whether err is worth a retry later: it wraps
// ErrBackendUnavailable, a context deadline or cancellation, or a gRPC status
// (Google's clients wrap theirs; the chain is searched) of Unavailable,
// DeadlineExceeded, Aborted, ResourceExhausted or Canceled.
//
// Internal is not transient: it says an invariant broke on the server
// (Google's AIP-194 does not retry it), and the few Internal errors that are
// really dropped streams are retried inside the Spanner client already.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrBackendUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	s, ok := status.FromError(err)
	if !ok {
		var gs interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &gs) {
			return false
		}
		s = gs.GRPCStatus()
	}
	switch s.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

// Backend wraps a failed backend call with its operation. A transient
// failure also wraps ErrBackendUnavailable (the caller answers 503); any
// other, a bug or a refused request, stays what it is (500), so a 503 never
// hides one.
func Backend(op string, err error) error {
	if Transient(err) {
		return fmt.Errorf("%w: %s: %w", ErrBackendUnavailable, op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Unavailable wraps err with its operation and ErrBackendUnavailable whatever
// the cause: for failures a retry is always the answer to, such as a publish
// the caller must repeat or a delivery Pub/Sub must redeliver. The cause stays
// in the chain.
func Unavailable(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrBackendUnavailable, op, err)
}
