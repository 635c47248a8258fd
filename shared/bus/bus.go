// Package bus publishes events to Pub/Sub and decodes the Pub/Sub pushes that
// reach event functions as CloudEvents.
package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/telemetry"
)

// Publisher publishes to one topic and waits for the server's ack, so that an
// accepted request never loses its event.
type Publisher struct {
	p     *pubsub.Publisher
	topic string
}

// NewPublisher publishes to topic through c. Messages published at the same
// moment by concurrent requests share one publish call (DelayThreshold).
func NewPublisher(c *pubsub.Client, topic string) *Publisher {
	p := c.Publisher(topic)
	p.PublishSettings.DelayThreshold = 5 * time.Millisecond
	p.PublishSettings.CountThreshold = 500
	p.PublishSettings.Timeout = 15 * time.Second
	return &Publisher{p: p, topic: topic}
}

// Publish publishes one message and waits until Pub/Sub has it. A failure is
// ErrBackendUnavailable: the caller answers 503 and the client retries.
func (p *Publisher) Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error) {
	ctx, attrs, end := telemetry.StartPublishSpan(ctx, p.topic, attrs)
	id, err := p.p.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs}).Get(ctx)
	end(id, err)
	if err != nil {
		return "", fmt.Errorf("%w: publish: %v", errs.ErrBackendUnavailable, err)
	}
	n, _ := published.LoadOrStore(p.topic, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return id, nil
}

// published counts the messages this process published, per topic.
var published sync.Map

// Published returns how many messages this process published on topic: the
// benchmarks' messages per operation.
func Published(topic string) int64 {
	if n, ok := published.Load(topic); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// Stop flushes and stops the publisher.
func (p *Publisher) Stop() { p.p.Stop() }

// Message is a Pub/Sub message as an event function receives it.
type Message struct {
	ID          string
	Data        []byte
	Attributes  map[string]string
	PublishTime time.Time
}

type pushData struct {
	Message struct {
		Data        []byte            `json:"data"`
		Attributes  map[string]string `json:"attributes"`
		MessageID   string            `json:"messageId"`
		PublishTime time.Time         `json:"publishTime"`
	} `json:"message"`
	Subscription string `json:"subscription"`
}

// ErrPoison marks a message that can never be processed: the function logs
// it and refuses it, so that Pub/Sub moves it to the dead-letter topic after
// the configured attempts instead of redelivering it forever.
var ErrPoison = errors.New("poison message")

// Consume is the shape every event function shares: it decodes the push,
// traces the message as name's consumer span and hands it to apply. An
// error from apply asks for a redelivery; one that wraps ErrPoison is also
// logged and counted as a dead-letter delivery (kept on the dead-letter
// topic for inspection, never silently dropped). m may be nil.
func Consume(name string, m *telemetry.Metrics, apply func(context.Context, Message) error) func(context.Context, event.Event) error {
	return func(ctx context.Context, e event.Event) (err error) {
		msg, err := FromCloudEvent(e)
		if err != nil {
			return poison(ctx, name, m, e.ID(), err)
		}
		ctx, end := telemetry.StartConsumerSpan(ctx, name, msg.ID, msg.Attributes)
		defer func() { end(err) }()
		if err = apply(ctx, msg); errors.Is(err, ErrPoison) {
			return poison(ctx, name, m, msg.ID, err)
		}
		return err
	}
}

func poison(ctx context.Context, name string, m *telemetry.Metrics, id string, err error) error {
	m.DeadLetterDelivery(ctx, name)
	slog.ErrorContext(ctx, name+": message can never be applied; refused, so that it is dead-lettered", "messageId", id, "error", err.Error())
	return err
}

// FromCloudEvent decodes the messagePublished CloudEvent that Pub/Sub push
// delivers (through functions-framework's conversion locally, through
// Eventarc in the cloud).
func FromCloudEvent(e event.Event) (Message, error) {
	m, _, err := DecodePush(e.Data())
	if err != nil {
		return Message{}, fmt.Errorf("%w: event %s: not a Pub/Sub message: %v", ErrPoison, e.ID(), err)
	}
	if m.ID == "" {
		m.ID = e.ID()
	}
	return m, nil
}

// PushEventType is the CloudEvent type of a message Pub/Sub pushed.
const PushEventType = "google.cloud.pubsub.topic.v1.messagePublished"

// PushCloudEvent is the messagePublished CloudEvent, of id, that an event
// function receives for the body of a Pub/Sub push (what functions-framework
// makes of the request locally, and Eventarc in the cloud).
func PushCloudEvent(id string, body []byte) event.Event {
	e := event.New()
	e.SetID(id)
	e.SetType(PushEventType)
	e.SetSource("//pubsub.googleapis.com/")
	// Setting JSON bytes as data cannot fail.
	_ = e.SetData(event.ApplicationJSON, body)
	return e
}

// PushBody is the body of a push of msg by subscription (its short name):
// what DecodePush reads. A zero PublishTime is now.
func PushBody(msg Message, subscription string) []byte {
	var d pushData
	d.Message.Data, d.Message.Attributes, d.Message.MessageID, d.Message.PublishTime = msg.Data, msg.Attributes, msg.ID, msg.PublishTime
	if d.Message.PublishTime.IsZero() {
		d.Message.PublishTime = time.Now().UTC()
	}
	d.Subscription = "projects/local/subscriptions/" + subscription
	// Bytes, strings and a time always marshal.
	b, _ := json.Marshal(d)
	return b
}

// PushEvent is the CloudEvent of a push of msg by subscription.
func PushEvent(msg Message, subscription string) event.Event {
	return PushCloudEvent(msg.ID, PushBody(msg, subscription))
}

// DecodePush decodes the body of a Pub/Sub push request (also the data of
// the messagePublished CloudEvent made from it): the message and the short
// name of the subscription that pushed it.
func DecodePush(body []byte) (Message, string, error) {
	var d pushData
	if err := json.Unmarshal(body, &d); err != nil {
		return Message{}, "", err
	}
	sub := d.Subscription
	if i := strings.LastIndex(sub, "/"); i >= 0 {
		sub = sub[i+1:]
	}
	return Message{
		ID:          d.Message.MessageID,
		Data:        d.Message.Data,
		Attributes:  d.Message.Attributes,
		PublishTime: d.Message.PublishTime,
	}, sub, nil
}
