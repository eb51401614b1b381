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

	"github.com/sleipnir-serving/sleipnir/pkg/testrig"
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
	read := 0
	for _, r := range rep.Results {
		if len(r.Path) == 2 {
			read++
		}
	}

	var byName map[string][]sdktrace.ReadOnlySpan
	var ids map[string]string // span id -> name
	ended := func() {
		byName, ids = map[string][]sdktrace.ReadOnlySpan{}, map[string]string{}
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
	}
	// The last hop ends its span just after reporting, so after the reply.
	if err := testrig.WaitFor(5*time.Second, "the frontend's and find_text's spans ended, and read_text's if lines "+
		"were read", func() bool {
		ended()
		return len(byName["frontend"]) >= 1 && len(byName["find_text"]) >= 1 && (read == 0 || len(byName["read_text"]) > 0)
	}); err != nil {
		t.Fatalf("%v: spans in the client's trace: %v", err, byName)
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
	for _, s := range byName["read_text"] {
		if p := ids[s.Parent().SpanID().String()]; p != "find_text" {
			t.Errorf("read_text's span has parent %q, want find_text's", p)
		}
	}
}
