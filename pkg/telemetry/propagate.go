package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// propagating is the tracer provider of a process that exports no spans: it records nothing, but a request still
// has one trace end to end. A span started under a parent is the parent's context itself, not recorded (a hop then
// costs no span, no allocation but the context's); a span without one (a request without a client's traceparent)
// gets new ids, sampled as sampler says, so that the frontend's reply names a trace and every hop carries its
// traceparent. A process downstream that exports records its spans under the last span an exporting process made
// (the process between made none), so the trace stays joined.
type propagating struct {
	embedded.TracerProvider
	tracer propagatingTracer
}

func newPropagating(sampler sdktrace.Sampler) *propagating {
	return &propagating{tracer: propagatingTracer{sampler: sampler}}
}

func (p *propagating) Tracer(string, ...trace.TracerOption) trace.Tracer { return p.tracer }

type propagatingTracer struct {
	embedded.Tracer
	sampler sdktrace.Sampler
}

func (t propagatingTracer) Start(ctx context.Context, name string, _ ...trace.SpanStartOption) (context.Context,
	trace.Span) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return noop.Tracer{}.Start(ctx, name) // the parent's context, not recording
	}
	var tid trace.TraceID
	var sid trace.SpanID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1) // never the invalid zero id
	var flags trace.TraceFlags
	if t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: name}).Decision ==
		sdktrace.RecordAndSample {
		flags = trace.FlagsSampled
	}
	ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: flags}))
	return ctx, trace.SpanFromContext(ctx)
}
