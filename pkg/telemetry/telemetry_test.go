package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestSetup(t *testing.T) {
	for _, endpoint := range []string{"", "http://127.0.0.1:1"} {
		t.Run("endpoint="+endpoint, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			shutdown, err := Setup(context.Background(), "test")
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("t").Start(context.Background(), "s")
			if !span.SpanContext().IsValid() || !span.SpanContext().IsSampled() {
				t.Errorf("span context %v: want valid and sampled, so a traceparent is always propagated", span.SpanContext())
			}
			span.End()
			// An unreachable collector must not hold a service's shutdown for long.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = shutdown(ctx)
		})
	}
}

// TestUnexportedCarriesTheTrace: without an exporter a process records no span, but a request keeps one trace: a
// span without a parent gets new ids, sampled as OTEL_TRACES_SAMPLER_ARG says, and a span under a parent is the
// parent's context, which the next hop's headers carry; it costs no allocation.
func TestUnexportedCarriesTheTrace(t *testing.T) {
	for _, tc := range []struct {
		ratio   string
		sampled bool
	}{{"", true}, {"0", false}} {
		t.Run("ratio="+tc.ratio, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.ratio)
			if _, err := Setup(context.Background(), "test"); err != nil {
				t.Fatal(err)
			}
			tracer := otel.Tracer("t")
			ctx, root := tracer.Start(context.Background(), "request")
			sc := root.SpanContext()
			if !sc.IsValid() || sc.IsSampled() != tc.sampled || root.IsRecording() {
				t.Fatalf("root span %v recording %v: want valid ids, sampled %v, not recording", sc,
					root.IsRecording(), tc.sampled)
			}
			// One hop: the root's context into a message's headers, out of them in the next process.
			headers := propagation.MapCarrier{}
			send := NewSendSpans("subject").Start(ctx, tracer, headers)
			next, process := NewProcessSpans("subject", "group").Start(context.Background(), tracer, headers)
			if got := process.SpanContext(); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() ||
				got.IsSampled() != tc.sampled || send.IsRecording() || process.IsRecording() {
				t.Fatalf("next hop's span %v (recording %v): want the root's context %v, not recording", got,
					process.IsRecording(), sc)
			}
			if n := testing.AllocsPerRun(100, func() { tracer.Start(next, "process") }); n != 0 {
				t.Errorf("a span under a parent allocates %v times", n)
			}
		})
	}
	otel.SetTracerProvider(noop.NewTracerProvider())
}
