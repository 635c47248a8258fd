package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// StartPublishSpan starts the producer span of one Pub/Sub message to topic.
// It returns the context to publish with, the message attributes with the
// span's trace context added (attrs itself is not changed), and end, which
// records the message id or the error and ends the span:
//
//	ctx, attrs, end := telemetry.StartPublishSpan(ctx, topic, attrs)
//	id, err := publisher.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs}).Get(ctx)
//	end(id, err)
func StartPublishSpan(ctx context.Context, topic string, attrs map[string]string) (context.Context, map[string]string, func(msgID string, err error)) {
	ctx, span := tracer().Start(ctx, "send "+topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemGCPPubSub,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationNameKey.String(topic),
		))
	return ctx, InjectAttributes(ctx, attrs), func(msgID string, err error) {
		if msgID != "" {
			span.SetAttributes(semconv.MessagingMessageIDKey.String(msgID))
		}
		endSpan(span, err)
	}
}

// StartConsumerSpan starts the span of an event function handling one Pub/Sub
// message, as a child of the span that published it (its trace context comes
// from the message's attributes), so that a request and the consumers of its
// events form one trace. The span of the push request that delivered the
// message, if ctx has one, is linked. end records the handler's error and
// ends the span:
//
//	ctx, end := telemetry.StartConsumerSpan(ctx, "ApplyCounters", msg.ID, msg.Attributes)
//	defer func() { end(err) }()
func StartConsumerSpan(ctx context.Context, function, msgID string, attrs map[string]string) (context.Context, func(error)) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemGCPPubSub,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingMessageIDKey.String(msgID),
			semconv.FaaSTriggerPubSub,
		),
	}
	// A message published without trace context continues the delivery's
	// trace, if any.
	parent := ExtractAttributes(ctx, attrs)
	if delivery := trace.SpanContextFromContext(ctx); delivery.IsValid() && !delivery.Equal(trace.SpanContextFromContext(parent)) {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: delivery}))
	}
	ctx, span := tracer().Start(parent, "process "+function, opts...)
	return ctx, func(err error) { endSpan(span, err) }
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
