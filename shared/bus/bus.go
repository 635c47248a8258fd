// Package bus publishes events to Pub/Sub and decodes the bodies of the
// Pub/Sub pushes that reach event functions.
package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/telemetry"
)

// Publisher publishes to one topic and waits for the server's ack, so that an
// accepted request never loses its event.
type Publisher struct {
	p     *pubsub.Publisher
	topic string
	// messages and bytes count what was published, by topic
	// (telemetry.MetricMessagesPublished, MetricMessageBytesPublished).
	messages, bytes metric.Int64Counter
	attrs           metric.MeasurementOption
}

// NewPublisher publishes to topic through c. Messages published at the same
// moment by concurrent requests share one publish call (DelayThreshold).
func NewPublisher(c *pubsub.Client, topic string) *Publisher {
	p := c.Publisher(topic)
	p.PublishSettings.DelayThreshold = 5 * time.Millisecond
	p.PublishSettings.CountThreshold = 500
	p.PublishSettings.Timeout = 15 * time.Second
	return &Publisher{p: p, topic: topic,
		messages: telemetry.NewCounter(nil, telemetry.MetricMessagesPublished, "{message}", "Pub/Sub messages published, by topic."),
		bytes:    telemetry.NewCounter(nil, telemetry.MetricMessageBytesPublished, "By", "Pub/Sub message data published, by topic."),
		attrs:    metric.WithAttributes(attribute.String(telemetry.AttrTopic, topic)),
	}
}

// Unbundled sends each message in its own publish call, at once, and
// returns p; call it before the first Publish. For a writer whose message
// is already a batch (a group commit's events), the client's own bundling
// only delays it: its wait for company is the writer's.
func (p *Publisher) Unbundled() *Publisher {
	p.p.PublishSettings.CountThreshold = 1
	return p
}

// Publish publishes one message and waits until Pub/Sub has it. A failure
// wraps ErrBackendUnavailable and its cause: the caller answers 503 and the
// client retries, since the client's own refusals (flow control, a stopped
// publisher) are no gRPC status that errs.Transient could judge.
func (p *Publisher) Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error) {
	ctx, attrs, end := telemetry.StartPublishSpan(ctx, p.topic, attrs)
	id, err := p.p.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs}).Get(ctx)
	end(id, err)
	if err != nil {
		return "", errs.Unavailable("publish to "+p.topic, err)
	}
	p.messages.Add(ctx, 1, p.attrs)
	p.bytes.Add(ctx, int64(len(data)), p.attrs)
	return id, nil
}

// Stop flushes and stops the publisher.
func (p *Publisher) Stop() { p.p.Stop() }

// Message is a Pub/Sub message as an event function receives it.
type Message struct {
	ID          string
	Data        []byte
	Attributes  map[string]string
	PublishTime time.Time
	// DeliveryAttempt counts the deliveries of the message, this one
	// included, on a subscription with a dead-letter policy; 0 when Pub/Sub
	// does not say.
	DeliveryAttempt int
}

// pushData is the body of a Pub/Sub push request in the wrapped format (a
// subscription without no_wrapper). Pub/Sub also sends message_id and
// publish_time, copies of the fields read here.
type pushData struct {
	Message         *pushMessage `json:"message"`
	Subscription    string       `json:"subscription"`
	DeliveryAttempt int          `json:"deliveryAttempt,omitempty"`
}

type pushMessage struct {
	Data        []byte            `json:"data"`
	Attributes  map[string]string `json:"attributes,omitempty"`
	MessageID   string            `json:"messageId"`
	PublishTime time.Time         `json:"publishTime"`
}

// ErrPoison marks a message that can never be processed: the function logs
// it and refuses it, so that Pub/Sub moves it to the dead-letter topic after
// the configured attempts instead of redelivering it forever.
var ErrPoison = errors.New("poison message")

// PushBody is the body of a push of msg by subscription (its short name):
// what DecodePush reads. A zero PublishTime is now.
func PushBody(msg Message, subscription string) []byte {
	var d pushData
	d.Message = &pushMessage{Data: msg.Data, Attributes: msg.Attributes, MessageID: msg.ID, PublishTime: msg.PublishTime}
	if d.Message.PublishTime.IsZero() {
		d.Message.PublishTime = time.Now().UTC()
	}
	d.Subscription = "projects/local/subscriptions/" + subscription
	d.DeliveryAttempt = msg.DeliveryAttempt
	// Bytes, strings and a time always marshal.
	b, _ := json.Marshal(d)
	return b
}

// DecodePush decodes the body of a Pub/Sub push request: the message and the
// short name of the subscription that pushed it. It is strict: a body that
// is not one JSON object, has no message, or a message without an id (the
// key of every log line and redelivery) is refused with an error wrapping
// ErrPoison that says what is wrong.
func DecodePush(body []byte) (Message, string, error) {
	var d pushData
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&d); err != nil {
		return Message{}, "", fmt.Errorf("%w: not a Pub/Sub push body: %w", ErrPoison, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Message{}, "", fmt.Errorf("%w: not a Pub/Sub push body: data after the JSON object", ErrPoison)
	}
	switch {
	case d.Message == nil:
		return Message{}, "", fmt.Errorf("%w: not a Pub/Sub push body: no message object", ErrPoison)
	case d.Message.MessageID == "":
		return Message{}, "", fmt.Errorf("%w: not a Pub/Sub push body: the message has no messageId", ErrPoison)
	}
	sub := d.Subscription
	if i := strings.LastIndex(sub, "/"); i >= 0 {
		sub = sub[i+1:]
	}
	return Message{
		ID:              d.Message.MessageID,
		Data:            d.Message.Data,
		Attributes:      d.Message.Attributes,
		PublishTime:     d.Message.PublishTime,
		DeliveryAttempt: d.DeliveryAttempt,
	}, sub, nil
}
