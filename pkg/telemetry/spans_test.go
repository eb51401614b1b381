package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSendThenProcess: a message's "send" span is its creation context, carried in its headers; the "process" span
// of the message is its child; both carry the messaging conventions' attributes.
func TestSendThenProcess(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t")
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(prev)

	const subject = "sleipnir.task.p.t.v"
	headers := propagation.MapCarrier{}
	send := StartSend(context.Background(), tracer, subject, headers, AttrTask.String("t"))
	send.End()
	if headers["traceparent"] == "" {
		t.Fatal("the send span's context is not in the headers")
	}
	_, process := StartProcess(context.Background(), tracer, subject, "t_v", headers)
	process.End()
	if process.SpanContext().TraceID() != send.SpanContext().TraceID() {
		t.Fatal("the process span is not in the send span's trace")
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	if spans[1].Parent().SpanID() != spans[0].SpanContext().SpanID() {
		t.Error("the process span's parent is not the send span")
	}
	for _, tc := range []struct {
		span trace.SpanKind
		name string
		want map[attribute.Key]string
	}{
		{trace.SpanKindProducer, "publish " + subject, map[attribute.Key]string{"messaging.system": "nats",
			"messaging.destination.name": subject, "messaging.operation.type": "send",
			"messaging.operation.name": "publish", AttrTask: "t"}},
		{trace.SpanKindConsumer, "process " + subject, map[attribute.Key]string{"messaging.system": "nats",
			"messaging.destination.name": subject, "messaging.operation.type": "process",
			"messaging.operation.name": "process", "messaging.consumer.group.name": "t_v"}},
	} {
		var s sdktrace.ReadOnlySpan
		for _, x := range spans {
			if x.Name() == tc.name {
				s = x
			}
		}
		if s == nil {
			t.Errorf("no span %q", tc.name)
			continue
		}
		if s.SpanKind() != tc.span {
			t.Errorf("%s: kind %v, want %v", tc.name, s.SpanKind(), tc.span)
		}
		got := map[attribute.Key]string{}
		for _, a := range s.Attributes() {
			got[a.Key] = a.Value.Emit()
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got[k], v)
			}
		}
	}
	if TraceID(send) != send.SpanContext().TraceID().String() || TraceID(trace.SpanFromContext(context.Background())) != "" {
		t.Error("TraceID")
	}
}

// TestStartGlobal: with no tracer provider installed, a message without a trace context gets a span that records
// nothing and has no context, without an allocation, and one with a trace context keeps it; once one is installed,
// the global tracer's spans are its own.
func TestStartGlobal(t *testing.T) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	defer func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) }()
	if !NoTracer() {
		otel.SetTracerProvider(initialProvider) // as before any was installed
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if !NoTracer() {
		t.Fatal("NoTracer false before a provider is installed")
	}
	spans := NewProcessSpans("subject", "group")
	tracer := otel.Tracer("t")
	none := propagation.MapCarrier{}
	if _, span := spans.StartGlobal(context.Background(), tracer, none); span.IsRecording() ||
		span.SpanContext().IsValid() {
		t.Errorf("no trace context, no tracer: span %v, recording %v", span.SpanContext(), span.IsRecording())
	}
	if n := testing.AllocsPerRun(100, func() { spans.StartGlobal(context.Background(), tracer, none) }); n != 0 {
		t.Errorf("no trace context, no tracer: %v allocations", n)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	traced := propagation.MapCarrier{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}
	if _, span := spans.StartGlobal(context.Background(), tracer, traced); span.SpanContext().TraceID().String() !=
		traceID {
		t.Errorf("a trace context, no tracer: span %v, want the message's trace", span.SpanContext())
	}

	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	if NoTracer() {
		t.Fatal("NoTracer true with a provider installed")
	}
	if _, span := spans.StartGlobal(context.Background(), tracer, none); !span.IsRecording() ||
		!span.SpanContext().IsValid() {
		t.Errorf("a provider installed: span %v, recording %v; want the provider's", span.SpanContext(),
			span.IsRecording())
	}
}
