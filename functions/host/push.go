package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/telemetry"
)

// maxPushBytes bounds a push body: Pub/Sub's largest message (10 MB) in
// base64, with its attributes and the envelope.
const maxPushBytes = 16 << 20

// Push is the handler of an event function: it reads the Pub/Sub push
// delivered to it (bus.DecodePush, the wrapped format), traces the message
// as name's consumer span and hands it to apply, as many pushes at once as
// the platform sends. The answer is the acknowledgement:
//   - 204 when apply succeeded: Pub/Sub acknowledges the message;
//   - 503 when apply failed otherwise: Pub/Sub redelivers after its backoff,
//     which apply's idempotence makes safe;
//   - 400 (413 for a body too large) for a body that is no push, or a
//     message apply refuses as poison (an error wrapping bus.ErrPoison):
//     logged, counted, and refused, so that Pub/Sub moves it to the
//     dead-letter topic after the configured attempts, never redelivering
//     it forever nor dropping it silently.
//
// Pub/Sub's identity is checked before the request arrives (Cloud Run's
// invoker IAM on the push subscription's OIDC token), so nothing here
// checks it again. m may be nil.
func Push(name string, m *telemetry.Metrics, apply func(context.Context, bus.Message) error) http.Handler {
	return httpx.Recover(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			httpx.WriteError(w, r, httpx.MethodNotAllowed(http.MethodPost))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPushBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			refuse(w, r, name, m, bus.Message{}, fmt.Errorf("%w: a push body of more than %d bytes", bus.ErrPoison, maxPushBytes),
				httpx.TooLarge(maxPushBytes))
			return
		case err != nil:
			httpx.WriteError(w, r, errs.Unavailable(name+": reading the push", err))
			return
		}
		msg, _, err := bus.DecodePush(body)
		if err != nil {
			refuse(w, r, name, m, msg, err, httpx.InvalidArgument(errs.InvalidMessage, "%s", err.Error()))
			return
		}
		ctx, end := telemetry.StartConsumerSpan(r.Context(), name, msg.ID, msg.Attributes)
		err = apply(ctx, msg)
		end(err)
		r = r.WithContext(ctx)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, bus.ErrPoison):
			refuse(w, r, name, m, msg, err, httpx.InvalidArgument(errs.InvalidMessage, "message %s can never be applied: %s", msg.ID, err.Error()))
		default:
			// Logged by WriteError with its detail; the answer says only
			// that a redelivery is wanted.
			httpx.WriteError(w, r, errs.Unavailable(name+": message "+msg.ID, err))
		}
	}))
}

// refuse logs and counts a poison delivery and answers it with answer.
func refuse(w http.ResponseWriter, r *http.Request, name string, m *telemetry.Metrics, msg bus.Message, err error, answer *httpx.Error) {
	ctx := r.Context()
	m.DeadLetterDelivery(ctx, name)
	slog.ErrorContext(ctx, name+": message can never be applied; refused, so that it is dead-lettered",
		"messageId", msg.ID, "deliveryAttempt", msg.DeliveryAttempt, "error", err.Error())
	httpx.WriteError(w, r, answer)
}
