// Package telemetry sets up OpenTelemetry tracing once per process.
package telemetry

import (
	"context"
	"os"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Setup installs the global tracer provider and the W3C trace-context propagator. A request always has a trace, so a
// traceparent travels with every request; spans are recorded and exported over OTLP/HTTP only when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set: without, the process only carries the
// trace context on (propagating), which costs a hop next to nothing. OTEL_TRACES_SAMPLER_ARG is the sampled ratio
// (default 1). An exporter that cannot reach its endpoint logs errors but never stops the service.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	ratio := 1.0
	if s := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); s != "" {
		if r, err := strconv.ParseFloat(s, 64); err == nil && r >= 0 && r <= 1 {
			ratio = r
		}
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		otel.SetTracerProvider(newPropagating(sdktrace.TraceIDRatioBased(ratio)))
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))), sdktrace.WithBatcher(exp))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
