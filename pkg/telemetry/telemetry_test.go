package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
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
