package up

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestTraceContextFlowsThroughEveryHop sends a request with a client's traceparent: the frontend's span and the span
// of every hop it went through belong to the client's trace, each hop's span a child of the previous one.
func TestTraceContextFlowsThroughEveryHop(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) }()

	sys, spec := startSystem(t, "../../examples/ocr-chain.yaml", 20)
	c := newClient(t, sys)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	subj := c.Send(t, spec.Name, inputRequest(t), nats.Header{"traceparent": []string{"00-" + traceID + "-00f067aa0ba902b7-01"}})
	rep := decodeReply(t, c.Wait(t, []string{subj}, 10*time.Second)[subj][0])
	if rep.Status != wire.StatusOK {
		t.Fatalf("status %q", rep.Status)
	}
	time.Sleep(100 * time.Millisecond) // the last hop ends its span just after reporting

	byName := map[string][]sdktrace.ReadOnlySpan{}
	ids := map[string]string{} // span id -> name
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() != traceID {
			continue
		}
		name := s.Name()
		switch {
		case strings.HasPrefix(name, "infer "):
			name = "frontend"
		case strings.Contains(name, ".find_text."):
			name = "find_text"
		case strings.Contains(name, ".read_text."):
			name = "read_text"
		}
		byName[name] = append(byName[name], s)
		ids[s.SpanContext().SpanID().String()] = name
	}
	if len(byName["frontend"]) != 1 || len(byName["find_text"]) != 1 {
		t.Fatalf("spans in the client's trace: %v", byName)
	}
	if got := byName["frontend"][0].Parent().SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("the frontend's span has parent %s, want the client's span", got)
	}
	if p := ids[byName["find_text"][0].Parent().SpanID().String()]; p != "frontend" {
		t.Errorf("find_text's span has parent %q, want the frontend's", p)
	}
	read := 0
	for _, r := range rep.Results {
		if len(r.Path) == 2 {
			read++
		}
	}
	if read > 0 && len(byName["read_text"]) == 0 {
		t.Fatalf("%d lines were read but no read_text span is in the trace", read)
	}
	for _, s := range byName["read_text"] {
		if p := ids[s.Parent().SpanID().String()]; p != "find_text" {
			t.Errorf("read_text's span has parent %q, want find_text's", p)
		}
	}
}
