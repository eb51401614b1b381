// Spans of Sleipnir's NATS hops, after the OpenTelemetry semantic conventions for messaging spans, v1.37.0
// (https://github.com/open-telemetry/semantic-conventions/blob/v1.37.0/docs/messaging/messaging-spans.md):
//   - a task message published into JetStream gets a "send" span (kind PRODUCER) whose context is injected into the
//     message's headers: it is the message's creation context (no "create" span, since each publish sends one
//     message);
//   - a worker processing one task message starts a "process" span (kind CONSUMER) whose parent is that creation
//     context: the conventions allow it for single messages, and it is what puts every hop of a request into the
//     request's trace;
//   - a model batch runs many messages of many requests: its own span links to each message's "process" span,
//     since a span has one parent and the conventions correlate batches by links.
// Span names are "{messaging.operation.name} {destination}"; a task subject is of low cardinality (one per variant of
// a spec), so it is the destination.

package telemetry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// MessagingSystem is messaging.system for NATS (the conventions' list is open; "nats" is what other NATS
// instrumentations write).
var MessagingSystem = semconv.MessagingSystemKey.String("nats")

// Operation names (messaging.operation.name), NATS's own verbs.
const (
	OpPublish = "publish"
	OpProcess = "process"
)

// Sleipnir's own span attributes.
const (
	AttrPipeline  = attribute.Key("sleipnir.pipeline")
	AttrTask      = attribute.Key("sleipnir.task")
	AttrVariant   = attribute.Key("sleipnir.variant")
	AttrRequestID = attribute.Key("sleipnir.request_id")
	AttrStatus    = attribute.Key("sleipnir.status")
	// AttrItems is how many items (inputs) one task message carries; AttrBatchSize how many the model batch it ran
	// in executed, whatever messages they came in.
	AttrItems     = attribute.Key("sleipnir.items")
	AttrBatchSize = attribute.Key("sleipnir.batch.size")
	// AttrDropReason is the reason of the first item dropped (pkg/wire's drop reasons), when one was.
	AttrDropReason = attribute.Key("sleipnir.drop_reason")
	// AttrDeadlineSlackMs is the time left to the request's deadline, in milliseconds, when the span began a hop's
	// processing (a worker) or sent the reply (a frontend); negative when late.
	AttrDeadlineSlackMs = attribute.Key("sleipnir.deadline.slack_ms")
	AttrAccuracy        = attribute.Key("sleipnir.accuracy")
)

// StartSend starts the "send" span of one message published to subject and injects its context into the message's
// headers (carrier), as the message's creation context. The caller ends the span when the publish is acknowledged.
func StartSend(ctx context.Context, tracer trace.Tracer, subject string, carrier propagation.TextMapCarrier,
	attrs ...attribute.KeyValue) trace.Span {
	span := NewSendSpans(subject).Start(ctx, tracer, carrier)
	span.SetAttributes(attrs...)
	return span
}

// StartProcess starts the "process" span of one message received on subject, a child of the creation context its
// headers (carrier) carry; group is the JetStream consumer (or queue group) it came through.
func StartProcess(ctx context.Context, tracer trace.Tracer, subject, group string, carrier propagation.TextMapCarrier,
	opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return NewProcessSpans(subject, group).Start(ctx, tracer, carrier, opts...)
}

// SendSpans starts the "send" spans of one subject (StartSend), their name and attributes made once: a worker keeps
// one per destination, and sets a message's own attributes only when its span is recorded (span.IsRecording), so
// that a trace context that is not sampled costs next to nothing.
type SendSpans struct {
	name string
	opts []trace.SpanStartOption
}

// NewSendSpans makes the "send" spans of subject.
func NewSendSpans(subject string) *SendSpans {
	return &SendSpans{name: OpPublish + " " + subject, opts: []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(MessagingSystem,
			semconv.MessagingDestinationName(subject), semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName(OpPublish))}}
}

// Start starts a "send" span and injects its context into carrier.
func (s *SendSpans) Start(ctx context.Context, tracer trace.Tracer, carrier propagation.TextMapCarrier) trace.Span {
	ctx, span := tracer.Start(ctx, s.name, s.opts...)
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	return span
}

// ProcessSpans starts the "process" spans of one subject and consumer group (StartProcess), made once per
// variant a worker serves, with attrs that every span of them carries.
type ProcessSpans struct {
	name string
	opts []trace.SpanStartOption
}

// NewProcessSpans makes the "process" spans of messages received on subject through group.
func NewProcessSpans(subject, group string, attrs ...attribute.KeyValue) *ProcessSpans {
	return &ProcessSpans{name: OpProcess + " " + subject, opts: []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(MessagingSystem,
			semconv.MessagingDestinationName(subject), semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName(OpProcess), semconv.MessagingConsumerGroupName(group)),
		trace.WithAttributes(attrs...)}}
}

// Start is StartProcess; opts are the message's own.
func (p *ProcessSpans) Start(ctx context.Context, tracer trace.Tracer, carrier propagation.TextMapCarrier,
	opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if len(opts) > 0 {
		opts = append(p.opts[:len(p.opts):len(p.opts)], opts...)
	} else {
		opts = p.opts
	}
	return tracer.Start(otel.GetTextMapPropagator().Extract(ctx, carrier), p.name, opts...)
}

// StartGlobal is Start for otel's global tracer (otel.Tracer's) and no options of the message's own. With no tracer
// provider installed (NoTracer), a message without a trace context gets the span that tracer would make, one that
// records nothing and has no context, without the tracer's two allocations: a worker starts a span a message, and
// an untraced hop is measured (BenchmarkHop).
func (p *ProcessSpans) StartGlobal(ctx context.Context, tracer trace.Tracer, carrier propagation.TextMapCarrier) (
	context.Context, trace.Span) {
	ctx = otel.GetTextMapPropagator().Extract(ctx, carrier)
	if NoTracer() && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracer.Start(ctx, p.name, p.opts...)
}

// initialProvider is otel's global tracer provider before any is installed; it delegates to the first installed.
var initialProvider = otel.GetTracerProvider()

// NoTracer says that no tracer provider is installed (otel.SetTracerProvider, Setup): otel's global tracer then
// makes spans that record nothing and carry their parent's context, if any.
func NoTracer() bool { return otel.GetTracerProvider() == initialProvider }

// TraceID is span's trace id in hex, or "" when it has none.
func TraceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
