package up

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
)

// TestBadInputOverNATS sends every kind of bad request: each gets exactly one clear error reply, and a good request
// afterwards is still served.
func TestBadInputOverNATS(t *testing.T) {
	sys, spec := startSystemWith(t, "../../examples/ocr-chain.yaml", Config{Workers: 20, Frontend: frontend.Config{MaxRequestBytes: 64 << 10}})
	c := newClient(t, sys)
	good := inputRequest(t)
	badTensor, _ := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Data: []byte{1, 2, 3}}}})
	noInputs, _ := msgpack.Marshal(&wire.InferRequest{})
	// Issue 25: a BYTES tensor whose shape claims 2^31-1 elements and whose data holds one; and a msgpack array of
	// inputs claiming 2^32-1 elements, with nothing behind the claim. Either, believed, takes tens of gigabytes.
	hugeShape, _ := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{{Name: "image", Datatype: wire.DatatypeBytes,
		Shape: []int64{1<<31 - 1}, Data: []byte{1, 0, 0, 0, 'a'}}}})
	hugeArray := append([]byte{0x81, 0xa6}, "inputs\xdd\xff\xff\xff\xff"...)
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	past := wire.FormatDeadline(time.Now().Add(-time.Second))
	tests := []struct {
		name     string
		pipeline string
		data     []byte
		hdr      nats.Header
		want     string
	}{
		{"garbage msgpack", spec.Name, []byte{0xc1, 0xff, 0x00}, nil, "not a msgpack InferRequest"},
		{"invalid JSON", spec.Name, []byte(`{"inputs": [`), hdr(wire.HeaderContentType, wire.ContentJSON), "not valid JSON"},
		{"unknown pipeline", "nope", good, nil, `unknown pipeline "nope"`},
		{"past deadline", spec.Name, good, hdr(wire.HeaderDeadline, past), "has already passed"},
		{"malformed deadline", spec.Name, good, hdr(wire.HeaderDeadline, "soon"), "want decimal Unix nanoseconds"},
		{"malformed timeout", spec.Name, good, hdr(wire.HeaderTimeout, "fast"), "want a duration"},
		{"negative timeout", spec.Name, good, hdr(wire.HeaderTimeout, "-5ms"), "has already passed"},
		{"oversized", spec.Name, make([]byte, 65<<10), nil, "exceeds the limit"},
		{"no inputs", spec.Name, noInputs, nil, "no inputs"},
		{"tensor data does not match shape", spec.Name, badTensor, nil, "inputs[0]"},
		{"BYTES shape claims 2^31-1 elements", spec.Name, hugeShape, nil, "claims 2147483647 BYTES elements"},
		{"msgpack array claims 2^32-1 elements", spec.Name, hugeArray, nil, "claims 4294967295 elements"},
	}
	var subjects []string
	for _, tc := range tests {
		subjects = append(subjects, c.Send(t, tc.pipeline, tc.data, tc.hdr))
	}
	// A request without a reply subject cannot be answered: it is counted and dropped, and nothing breaks.
	if err := c.Conn().Publish(wire.InferSubject(spec.Name), good); err != nil {
		t.Fatal(err)
	}
	goodSubject := c.Send(t, spec.Name, good, nil)
	replies := c.Wait(t, append(subjects, goodSubject), 10*time.Second)
	c.ExpectOneReply(t, append(subjects, goodSubject), 100*time.Millisecond)
	for i, tc := range tests {
		msgs := replies[subjects[i]]
		var rep wire.InferReply
		if strings.HasPrefix(msgs[0].Header.Get(wire.HeaderContentType), wire.ContentJSON) {
			if err := json.Unmarshal(msgs[0].Data, &rep); err != nil {
				t.Fatalf("%s: undecodable JSON reply: %v", tc.name, err)
			}
		} else {
			rep = decodeReply(t, msgs[0])
		}
		if rep.Status != wire.StatusError || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s: reply %q %q, want an error containing %q", tc.name, rep.Status, rep.Error, tc.want)
		}
		if msgs[0].Header.Get(wire.HeaderError) != rep.Error {
			t.Errorf("%s: %s header %q differs from the reply's error", tc.name, wire.HeaderError, msgs[0].Header.Get(wire.HeaderError))
		}
	}
	if rep := decodeReply(t, replies[goodSubject][0]); rep.Status != wire.StatusOK {
		t.Errorf("a good request after the bad ones: status %q %q", rep.Status, rep.Error)
	}
	if st := sys.Frontend.Stats(); st.Refused != uint64(len(tests)+1) {
		t.Errorf("refused %d, want %d", st.Refused, len(tests)+1)
	}
}

// TestJSONAndDeadlines: a JSON request gets a JSON reply; a request whose deadline is shorter than the pipeline can
// possibly take gets one reply by its deadline: late (the frontend's timer fired first) or dropped (a worker saw, under
// the default reroute policy, that it could not make it).
func TestJSONAndDeadlines(t *testing.T) {
	sys, spec := startSystem(t, "../../examples/ocr-chain.yaml", 20)
	c := newClient(t, sys)
	body := []byte(`{"id": "j1", "inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`)
	js := c.Send(t, spec.Name, body, nil)
	start := time.Now()
	late := c.Send(t, spec.Name, inputRequest(t), nats.Header{wire.HeaderTimeout: []string{"1ms"}})
	replies := c.Wait(t, []string{js, late}, 10*time.Second)

	var rep wire.InferReply
	if err := json.Unmarshal(replies[js][0].Data, &rep); err != nil {
		t.Fatalf("JSON request got a non-JSON reply: %v", err)
	}
	if rep.Status != wire.StatusOK || rep.ID != "j1" || len(rep.Results) == 0 {
		t.Errorf("JSON reply %+v", rep)
	}
	lr := decodeReply(t, replies[late][0])
	// Admission control refuses it at once (shorter than the fastest path); without it, it is late or dropped.
	if lr.Status != wire.StatusOverloaded && lr.Status != wire.StatusLate && lr.Status != wire.StatusDropped {
		t.Errorf("a 1 ms deadline got status %q, want overloaded, late or dropped", lr.Status)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("the late reply came after %v; it is due at the deadline", el)
	}
}

func TestHTTPv2(t *testing.T) {
	sys, spec := startSystem(t, "../../examples/ocr-chain.yaml", 20)
	srv := httptest.NewServer(sys.Frontend.Handler())
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for path, want := range map[string]int{
		"/v2/health/live": 200, "/v2/health/ready": 200, "/v2/models/" + spec.Name: 200,
		"/v2/models/" + spec.Name + "/ready": 200, "/v2/models/nope": 404,
	} {
		if got := get(path); got != want {
			t.Errorf("GET %s: %d, want %d", path, got, want)
		}
	}
	post := func(model, body string) (int, map[string]any) {
		resp, err := http.Post(srv.URL+"/v2/models/"+model+"/infer", wire.ContentJSON, bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("POST %s: non-JSON response %q", model, data)
		}
		return resp.StatusCode, out
	}
	good := `{"id": "h1", "inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`
	code, out := post(spec.Name, good)
	if code != 200 || out["status"] != wire.StatusOK || out["id"] != "h1" || out["model_name"] != spec.Name {
		t.Errorf("good request: %d %v", code, out)
	}
	if outs, _ := out["outputs"].([]any); len(outs) == 0 {
		t.Errorf("good request: no outputs in %v", out)
	}
	for _, tc := range []struct {
		model, body string
		code        int
		want        string
	}{
		{"nope", good, 404, "unknown pipeline"},
		{spec.Name, `{"inputs": `, 400, "not a KServe v2 JSON request"},
		{spec.Name, `{"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1]}]}`, 400, "x"},
	} {
		code, out := post(tc.model, tc.body)
		if msg, _ := out["error"].(string); code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("POST %s %q: %d %v, want %d with %q", tc.model, tc.body, code, out, tc.code, tc.want)
		}
	}
}

// TestShutdownAnswersEveryRequest stops the system while requests are in flight: each still gets exactly one reply,
// finished or an error saying the frontend is shutting down.
func TestShutdownAnswersEveryRequest(t *testing.T) {
	sys, spec := startSystem(t, "../../examples/ocr-chain.yaml", 20)
	nc, err := bus.ConnectInProcess(sys.Server, "client") // not closed by the system, so it hears every reply
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := testrig.NewClient(t, nc)
	var subjects []string
	for i := 0; i < 50; i++ {
		subjects = append(subjects, c.Send(t, spec.Name, inputRequest(t), nats.Header{wire.HeaderTimeout: []string{"10s"}}))
	}
	nc.Flush()
	time.Sleep(20 * time.Millisecond) // the scenario: the stop comes while the requests are in flight
	sys.Stop()
	if err := sys.Wait(); err != nil {
		t.Fatal(err)
	}
	replies := c.Wait(t, subjects, 5*time.Second)
	shut := 0
	for _, s := range subjects {
		if len(replies[s]) != 1 {
			t.Fatalf("request %s got %d replies", s, len(replies[s]))
		}
		rep := decodeReply(t, replies[s][0])
		switch {
		case rep.Status == wire.StatusOK:
		case rep.Status == wire.StatusError && strings.Contains(rep.Error, "shutting down"):
			shut++
		default:
			t.Errorf("request %s: %q %q", s, rep.Status, rep.Error)
		}
	}
	t.Logf("%d of %d requests were cut short by the shutdown", shut, len(subjects))
}

// TestClaimedLengthsOnEverySubject: a message whose msgpack claims an array of 2^32-1 elements, or a string or bin of
// 2^32-1 bytes, with nothing behind the claim, on each subject a service reads (the frontend's results, a variant's
// task subject, the planner's demand subject) is discarded and counted, and the system keeps serving. Believed, an
// array's or a bin's claim takes gigabytes and kills the process (a string's costs msgpack 1 MiB: the planner's demand
// report, which holds no array, is here to show it is still discarded).
func TestClaimedLengthsOnEverySubject(t *testing.T) {
	sys, spec := startSystemWith(t, "../../examples/ocr-chain.yaml", Config{Workers: 20})
	c := newClient(t, sys)
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	// claim is a one-field map whose value claims 2^32-1 (code: 0xdd array, 0xdb string, 0xc6 bin).
	claim := func(field string, code byte) []byte {
		return append(append([]byte{0x81, 0xa0 | byte(len(field))}, field...), code, 0xff, 0xff, 0xff, 0xff)
	}
	tensorData := append([]byte{0x81, 0xa5}, "items\x91\x81\xa6inputs\x91"...)
	tensorData = append(tensorData, claim("data", 0xc6)...)
	const frontendID = "up-frontend" // up's frontend
	for _, data := range [][]byte{claim("items", 0xdd), claim("request_id", 0xdb)} {
		if err := c.Conn().Publish(wire.ResultSubject(frontendID), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Conn().Publish(wire.DemandSubject(spec.Name), claim("frontend", 0xdb)); err != nil {
		t.Fatal(err)
	}
	a := spec.Allocation[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, data := range [][]byte{claim("items", 0xdd), tensorData} {
		// Headers as the frontend sets them, so that the worker gets as far as the payload.
		m := nats.NewMsg(wire.TaskSubject(spec.Name, a.Task, a.Variant))
		m.Data = data
		m.Header.Set(wire.HeaderRequestID, fmt.Sprintf("claim-%d", i))
		m.Header.Set(wire.HeaderReplyTo, wire.ResultSubject("nobody"))
		m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(10*time.Second)))
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("claim-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	good := c.Send(t, spec.Name, inputRequest(t), nil)
	if rep := decodeReply(t, c.Wait(t, []string{good}, 10*time.Second)[good][0]); rep.Status != wire.StatusOK {
		t.Errorf("a good request after the claims: status %q %q", rep.Status, rep.Error)
	}
	var discarded, bad uint64
	if err := testrig.WaitFor(5*time.Second, "2 task messages discarded by the workers and 2 bad reports counted by "+
		"the frontend", func() bool {
		discarded = 0
		for _, w := range sys.Workers {
			discarded += w.Stats().Discarded
		}
		bad = sys.Frontend.Stats().BadReports
		return discarded == 2 && bad == 2
	}); err != nil {
		t.Fatalf("%v: %d discarded, %d bad reports", err, discarded, bad)
	}
}
