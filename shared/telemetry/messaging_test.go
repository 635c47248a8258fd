package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// newPubSub is an in-memory Pub/Sub server with topic "events" and its
// subscription "apply".
func newPubSub(t *testing.T) *pubsub.Client {
	t.Helper()
	ctx := context.Background()
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pubsub.NewClient(ctx, "p", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/events"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/p/subscriptions/apply", Topic: "projects/p/topics/events", AckDeadlineSeconds: 10,
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// receiveOne returns the next message of the subscription.
func receiveOne(t *testing.T, c *pubsub.Client) *pubsub.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got *pubsub.Message
	err := c.Subscriber("apply").Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if got == nil {
			got = m
		}
		cancel()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("no message received")
	}
	return got
}

// TestPublishConsumeRoundTrip follows one request through a real Pub/Sub
// client: the consumer's span is in the request's trace, the child of the
// publish span.
func TestPublishConsumeRoundTrip(t *testing.T) {
	rec := useRecorder(t)
	c := newPubSub(t)
	ctx, request := tracer().Start(context.Background(), "PUT /v1/reactions/{contentId}", trace.WithSpanKind(trace.SpanKindServer))

	pctx, attrs, end := StartPublishSpan(ctx, "events", map[string]string{"type": "counter"})
	id, err := c.Publisher("events").Publish(pctx, &pubsub.Message{Data: []byte("{}"), Attributes: attrs}).Get(pctx)
	end(id, err)
	if err != nil {
		t.Fatal(err)
	}
	request.End()

	msg := receiveOne(t, c)
	if msg.Attributes["type"] != "counter" {
		t.Errorf("attributes %v lost the caller's own", msg.Attributes)
	}
	cctx, endConsume := StartConsumerSpan(context.Background(), "ApplyCounters", msg.ID, msg.Attributes)
	_, store := tracer().Start(cctx, "spanner.commit")
	store.End()
	endConsume(nil)

	spans := rec.ended()
	send, process, commit := spans["send events"], spans["process ApplyCounters"], spans["spanner.commit"]
	if send == nil || process == nil || commit == nil {
		t.Fatalf("spans %v, want send, process and the consumer's child", names(rec.spans.Ended()))
	}
	traceID := request.SpanContext().TraceID()
	for _, s := range []sdktrace.ReadOnlySpan{send, process, commit} {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q is in trace %s, want the request's %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
	}
	if send.Parent().SpanID() != request.SpanContext().SpanID() || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span: parent %v kind %v, want the request, producer", send.Parent(), send.SpanKind())
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() || !process.Parent().IsRemote() || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("process span: parent %v kind %v, want the remote send span, consumer", process.Parent(), process.SpanKind())
	}
	if commit.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Errorf("consumer's child has parent %v, want the process span", commit.Parent())
	}
	if got := attr(send, "messaging.message.id"); got != id {
		t.Errorf("send span message id %q, want %q", got, id)
	}
	if got := attr(process, "messaging.message.id"); got != msg.ID {
		t.Errorf("process span message id %q, want %q", got, msg.ID)
	}
	if got := attr(send, "messaging.destination.name"); got != "events" {
		t.Errorf("send span destination %q", got)
	}
}

// TestConsumerSpanFollowsSampling: a message of an unrecorded trace keeps
// its trace id and is not recorded either.
func TestConsumerSpanFollowsSampling(t *testing.T) {
	rec := useRecorder(t)
	attrs := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}
	ctx, end := StartConsumerSpan(context.Background(), "ApplyHistory", "m1", attrs)
	end(nil)
	if id, _, sampled := TraceIDs(ctx); id != "4bf92f3577b34da6a3ce929d0e0e4736" || sampled {
		t.Errorf("consumer of an unsampled message: trace %s sampled %v", id, sampled)
	}
	if n := len(rec.spans.Ended()); n != 0 {
		t.Errorf("%d spans recorded for an unsampled trace", n)
	}
}

// TestConsumerSpanWithoutContext: a message published without trace context
// continues the delivery's trace if there is one; else it starts one. A
// delivery span that is not the parent is linked.
func TestConsumerSpanWithoutContext(t *testing.T) {
	rec := useRecorder(t)
	dctx, delivery := tracer().Start(context.Background(), "POST /ApplyCounters")
	ctx, end := StartConsumerSpan(dctx, "ApplyCounters", "m1", map[string]string{"type": "counter"})
	end(errors.New("spanner unavailable"))
	delivery.End()
	s := rec.ended()["process ApplyCounters"]
	if s == nil {
		t.Fatal("no consumer span")
	}
	if s.Parent().SpanID() != delivery.SpanContext().SpanID() || len(s.Links()) != 0 {
		t.Errorf("parent %v links %v, want the delivery as parent, no link", s.Parent(), s.Links())
	}
	if s.Status().Code != codes.Error || len(s.Events()) == 0 {
		t.Errorf("status %v events %v, want the error recorded", s.Status(), s.Events())
	}
	if id, _, _ := TraceIDs(ctx); id != delivery.SpanContext().TraceID().String() {
		t.Errorf("trace %s, want the delivery's", id)
	}

	// With trace context in the message, the delivery is a link.
	_, end = StartConsumerSpan(dctx, "ApplyHistory", "m2", map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	end(nil)
	s = rec.ended()["process ApplyHistory"]
	if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace %s, want the message's", s.SpanContext().TraceID())
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != delivery.SpanContext().SpanID() {
		t.Errorf("links %v, want the delivery span", s.Links())
	}

	// Without any context: a new trace.
	ctx, end = StartConsumerSpan(context.Background(), "ApplyHistory", "m3", nil)
	end(nil)
	if id, _, _ := TraceIDs(ctx); id == "" || id == delivery.SpanContext().TraceID().String() {
		t.Errorf("trace %q, want a new one", id)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
