package up

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// hopSpan is one span of a request's trace, as the SDK records it or as Jaeger returns it.
type hopSpan struct {
	ID, Parent, Name, Kind string // Kind in lower case: "consumer", "producer", ...
	Attrs                  map[string]string
}

// checkHops checks the trace of one ocr-chain request whose client span is clientSpan: the frontend's "process"
// span of the request (a child of the client's), a "publish" span of the root task message under it, find_text's
// "process" span under that, and every read_text "process" span under a "publish" span under find_text's, each with
// the messaging attributes the conventions require. It returns what is wrong, and whether read_text's spans, when
// readText says lines were read, are all there.
func checkHops(spans []hopSpan, pipelineName, clientSpan string, readText bool) (problems []string, complete bool) {
	byID := map[string]hopSpan{}
	var frontend, findText, readSpans []hopSpan
	for _, s := range spans {
		byID[s.ID] = s
		switch {
		case s.Name == "process "+wire.InferSubject(pipelineName):
			frontend = append(frontend, s)
		case strings.HasPrefix(s.Name, "process "+wire.TaskPrefix+pipelineName+".find_text."):
			findText = append(findText, s)
		case strings.HasPrefix(s.Name, "process "+wire.TaskPrefix+pipelineName+".read_text."):
			readSpans = append(readSpans, s)
		}
	}
	if len(frontend) != 1 || len(findText) != 1 || (readText && len(readSpans) == 0) {
		return []string{fmt.Sprintf("%d frontend, %d find_text and %d read_text spans", len(frontend),
			len(findText), len(readSpans))}, false
	}
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	messaging := func(s hopSpan, op, kind string) {
		dest := strings.TrimPrefix(s.Name, strings.SplitN(s.Name, " ", 2)[0]+" ")
		if s.Kind != kind || s.Attrs["messaging.system"] != "nats" || s.Attrs["messaging.operation.type"] != op ||
			s.Attrs["messaging.destination.name"] != dest {
			bad("span %q: kind %s, attributes %v: want kind %s, messaging.system nats, messaging.operation.type "+
				"%s, messaging.destination.name %s", s.Name, s.Kind, s.Attrs, kind, op, dest)
		}
	}
	// parentSend checks that s is the child of a "publish" span of its own subject under want, and returns it.
	parentSend := func(s hopSpan, want hopSpan) {
		p, ok := byID[s.Parent]
		if !ok || p.Name != "publish "+strings.TrimPrefix(s.Name, "process ") {
			bad("span %q has parent %q, want the publish span of its message", s.Name, p.Name)
			return
		}
		messaging(p, "send", "producer")
		if p.Parent != want.ID {
			bad("span %q has parent %q, want %q", p.Name, byID[p.Parent].Name, want.Name)
		}
	}
	fe := frontend[0]
	messaging(fe, "process", "consumer")
	if fe.Parent != clientSpan {
		bad("the frontend's span has parent %s, want the client's span %s", fe.Parent, clientSpan)
	}
	if fe.Attrs["sleipnir.status"] != wire.StatusOK || fe.Attrs["sleipnir.pipeline"] != pipelineName {
		bad("the frontend's span has attributes %v, want sleipnir.status ok, sleipnir.pipeline %s", fe.Attrs,
			pipelineName)
	}
	for _, s := range append(findText, readSpans...) {
		messaging(s, "process", "consumer")
		for _, k := range []string{"sleipnir.variant", "sleipnir.batch.size", "sleipnir.deadline.slack_ms",
			"messaging.consumer.group.name"} {
			if s.Attrs[k] == "" {
				bad("span %q has no %s: %v", s.Name, k, s.Attrs)
			}
		}
	}
	parentSend(findText[0], fe)
	for _, s := range readSpans {
		parentSend(s, findText[0])
	}
	return problems, true
}

// recordSpans installs, for the test's length, a tracer provider that records every span, and the W3C propagator.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	return rec
}

// httpTraceIDs sends req and returns the trace ids its response names: the header, parameters.trace_id, trace_id.
func httpTraceIDs(t *testing.T, req *http.Request) [3]string {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Parameters map[string]string `json:"parameters"`
		TraceID    string            `json:"trace_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return [3]string{resp.Header.Get(wire.HeaderTraceID), out.Parameters["trace_id"], out.TraceID}
}

// TestHTTPResponseCarriesTraceID: an HTTP request's response names the trace it continued, in the header, the OIP
// parameters and the reply's field, and the request's span is the HTTP server span of the infer route.
func TestHTTPResponseCarriesTraceID(t *testing.T) {
	rec := recordSpans(t)
	sys, spec := startSystem(t, "../../examples/ocr-chain.yaml", 20)
	srv := httptest.NewServer(sys.Frontend.Handler())
	defer srv.Close()
	const traceID = "5bf92f3577b34da6a3ce929d0e0e4737"
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v2/models/"+spec.Name+"/infer", strings.NewReader(
		`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if ids := httpTraceIDs(t, req); ids != [3]string{traceID, traceID, traceID} {
		t.Errorf("header %s, parameters.trace_id and trace_id: %q, want %s in each", wire.HeaderTraceID, ids, traceID)
	}
	server := 0
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() == traceID && s.Name() == "POST /v2/models/{name}/infer" &&
			s.SpanKind() == trace.SpanKindServer {
			server++
		}
	}
	if server != 1 {
		t.Errorf("%d server spans of the infer route in the client's trace, want 1", server)
	}
}

// TestTraceContextFlowsThroughEveryHop sends a request with a client's traceparent: the frontend's span and the span
// of every hop it went through belong to the client's trace, each hop's span a child of the span that published its
// message, and the reply carries the trace id.
func TestTraceContextFlowsThroughEveryHop(t *testing.T) {
	rec := recordSpans(t)
	sys, spec := startSystem(t, "../../examples/ocr-chain.yaml", 20)
	c := newClient(t, sys)
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	subj := c.Send(t, spec.Name, inputRequest(t), nats.Header{"traceparent": []string{"00-" + traceID + "-" + clientSpan + "-01"}})
	m := c.Wait(t, []string{subj}, 10*time.Second)[subj][0]
	rep := decodeReply(t, m)
	if rep.Status != wire.StatusOK {
		t.Fatalf("status %q", rep.Status)
	}
	if rep.TraceID != traceID || m.Header.Get(wire.HeaderTraceID) != traceID {
		t.Errorf("the reply carries trace id %q, header %s %q: want the client's, %s", rep.TraceID,
			wire.HeaderTraceID, m.Header.Get(wire.HeaderTraceID), traceID)
	}
	read := false
	for _, r := range rep.Results {
		read = read || len(r.Path) == 2
	}

	spans := func() []hopSpan {
		var out []hopSpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() != traceID {
				continue
			}
			attrs := map[string]string{}
			for _, a := range s.Attributes() {
				attrs[string(a.Key)] = a.Value.Emit()
			}
			out = append(out, hopSpan{ID: s.SpanContext().SpanID().String(), Parent: s.Parent().SpanID().String(),
				Name: s.Name(), Kind: s.SpanKind().String(), Attrs: attrs})
		}
		return out
	}
	// The last hop ends its span just after reporting, so after the reply.
	var problems []string
	if err := testrig.WaitFor(5*time.Second, "every hop's span ended", func() bool {
		var complete bool
		problems, complete = checkHops(spans(), spec.Name, clientSpan, read)
		return complete
	}); err != nil {
		t.Fatalf("%v: %v", err, problems)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
