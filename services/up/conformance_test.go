package up

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
)

// oipSpec is a chain of two emulated tasks, 100 ms and a slow 1 s, under the last-task policy, so that a request's
// fate follows from its timeout, with a wide margin for a slow machine: with the SLO it finishes (200); with 50 ms
// its reply is due while the first task still runs (late, 504); with 600 ms the first task finishes with less time
// left than the last takes, which drops it at once (503).
const oipSpec = `
name: oip
slo_ms: 2000
deadline_policy: last-task
inputs:
  - {name: image, datatype: FP32, shape: [-1, -1]}
outputs:
  - {name: score, datatype: FP32, shape: [1]}
tasks:
  - name: first
    children: [last]
    variants:
      - name: a
        accuracy: 0.9
        executor: {kind: emulated}
        fanout: {mean: 1, distribution: fixed}
        profile: [{batch: 1, p50_ms: 100, p95_ms: 110}]
  - name: last
    variants:
      - name: b
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 1000, p95_ms: 1050}]
allocation:
  - {task: first, variant: a, replicas: 1, max_batch: 1}
  - {task: last, variant: b, replicas: 1, max_batch: 1}
`

// oipResponse is an HTTP response of the OIP API: its status, headers, body, and the body as JSON.
type oipResponse struct {
	code   int
	header http.Header
	body   []byte
	json   map[string]any
}

func oipDo(t *testing.T, url, method, path string, header map[string]string, body io.Reader) oipResponse {
	t.Helper()
	req, err := http.NewRequest(method, url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := oipResponse{code: resp.StatusCode, header: resp.Header}
	out.body, _ = io.ReadAll(resp.Body)
	head := out.body
	if n := resp.Header.Get(wire.HeaderInferenceHeaderLength); n != "" {
		l, err := strconv.Atoi(n)
		if err != nil || l > len(out.body) {
			t.Fatalf("%s %s: %s %q for a body of %d bytes", method, path, wire.HeaderInferenceHeaderLength, n, len(out.body))
		}
		head = out.body[:l]
	}
	if method != http.MethodHead {
		if err := json.Unmarshal(head, &out.json); err != nil {
			t.Fatalf("%s %s: %d, body not JSON: %q", method, path, out.code, out.body)
		}
	}
	return out
}

// TestHTTPConformance replays the requests of the Open Inference Protocol v2 (docs/http.md), endpoint by endpoint,
// and one request for each HTTP status the live system can be made to answer; httpStatus's own test covers the
// rest of the mapping.
func TestHTTPConformance(t *testing.T) {
	const limit = 64 << 10
	// Without admission control: the statuses of a request dropped or late on its way are what is checked, and
	// the gate would refuse those deadlines at once (shorter than the fastest path).
	sys, _ := startSpecSystem(t, oipSpec, Config{Workers: 2, Frontend: frontend.Config{MaxRequestBytes: limit,
		NoAdmission: true}})
	srv := httptest.NewServer(sys.Frontend.Handler())
	defer srv.Close()
	do := func(method, path string, header map[string]string, body string) oipResponse {
		t.Helper()
		return oipDo(t, srv.URL, method, path, header, strings.NewReader(body))
	}
	expect := func(r oipResponse, what string, code int, check func(map[string]any) bool) {
		t.Helper()
		if r.code != code || !check(r.json) {
			t.Errorf("%s: %d %s, want %d", what, r.code, r.body, code)
		}
		if r.code >= 400 {
			if msg, _ := r.json["error"].(string); msg == "" {
				t.Errorf("%s: %d without an error message: %s", what, r.code, r.body)
			}
		}
		if want := r.code == 429 || r.code == 503; want != (r.header.Get(wire.HeaderRetryAfter) != "") {
			t.Errorf("%s: %d with %s %q", what, r.code, wire.HeaderRetryAfter, r.header.Get(wire.HeaderRetryAfter))
		}
	}
	anything := func(map[string]any) bool { return true }
	errorSays := func(s string) func(map[string]any) bool {
		return func(j map[string]any) bool { msg, _ := j["error"].(string); return strings.Contains(msg, s) }
	}

	// Server metadata and health.
	expect(do("GET", "/v2", nil, ""), "server metadata", 200, func(j map[string]any) bool {
		ext, _ := j["extensions"].([]any)
		return j["name"] == "sleipnir" && j["version"] != "" && slices.Contains(ext, any(wire.ExtensionBinaryTensorData))
	})
	expect(do("GET", "/v2/health/live", nil, ""), "live", 200, func(j map[string]any) bool { return j["live"] == true })
	expect(do("GET", "/v2/health/ready", nil, ""), "ready", 200, func(j map[string]any) bool { return j["ready"] == true })

	// Model metadata and readiness, with and without a version; unknown models and versions are 404.
	metadata := func(j map[string]any) bool {
		got, _ := json.Marshal(j)
		return string(got) == `{"inputs":[{"datatype":"FP32","name":"image","shape":[-1,-1]}],"name":"oip",`+
			`"outputs":[{"datatype":"FP32","name":"score","shape":[1]}],"platform":"sleipnir","versions":["1"]}`
	}
	expect(do("GET", "/v2/models/oip", nil, ""), "model metadata", 200, metadata)
	expect(do("GET", "/v2/models/oip/versions/1", nil, ""), "model metadata of version 1", 200, metadata)
	expect(do("GET", "/v2/models/oip/versions/2", nil, ""), "model metadata of version 2", 404, errorSays(`no version "2"`))
	expect(do("GET", "/v2/models/nope", nil, ""), "unknown model's metadata", 404, errorSays(`unknown pipeline "nope"`))
	expect(do("GET", "/v2/models/oip/ready", nil, ""), "model ready", 200, func(j map[string]any) bool { return j["ready"] == true })
	expect(do("GET", "/v2/models/oip/versions/1/ready", nil, ""), "model version ready", 200, anything)
	expect(do("GET", "/v2/models/nope/ready", nil, ""), "unknown model's readiness", 404, errorSays("unknown pipeline"))

	// Unknown paths and methods: JSON errors too.
	expect(do("GET", "/v2/nothing/here", nil, ""), "unknown path", 404, errorSays("no endpoint"))
	expect(do("GET", "/", nil, ""), "root", 404, errorSays("no endpoint"))
	r := do("DELETE", "/v2/models/oip", nil, "")
	expect(r, "DELETE a model", 405, errorSays("use GET"))
	if r.header.Get("Allow") != "GET" {
		t.Errorf("405 with Allow %q, want GET", r.header.Get("Allow"))
	}
	expect(do("GET", "/v2/models/oip/infer", nil, ""), "GET infer", 405, errorSays("use POST"))

	// Inference: JSON, with a version, and the statuses of what became of a request.
	const good = `{"id": "c1", "inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`
	okReply := func(j map[string]any) bool {
		outs, _ := j["outputs"].([]any)
		first, _ := outs[0].(map[string]any)
		name, _ := first["name"].(string)
		return j["id"] == "c1" && j["model_name"] == "oip" && j["status"] == wire.StatusOK && len(outs) == 1 &&
			strings.HasSuffix(name, "/score") && j["error"] == nil
	}
	expect(do("POST", "/v2/models/oip/infer", nil, good), "infer", 200, okReply)
	expect(do("POST", "/v2/models/oip/versions/1/infer", nil, good), "infer version 1", 200, okReply)
	expect(do("POST", "/v2/models/oip/versions/7/infer", nil, good), "infer version 7", 404, errorSays(`no version "7"`))
	expect(do("POST", "/v2/models/nope/infer", nil, good), "infer an unknown model", 404, errorSays("unknown pipeline"))
	expect(do("POST", "/v2/models/oip/infer", nil, `{"inputs": `), "infer bad JSON", 400, errorSays("not a KServe v2 JSON request"))
	expect(do("POST", "/v2/models/oip/infer", nil, `{"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1]}]}`),
		"infer a bad tensor", 400, errorSays("1 data elements, want 3"))
	// Dropped first: the late request leaves the first task's one worker busy after its reply.
	expect(do("POST", "/v2/models/oip/infer", map[string]string{wire.HeaderTimeout: "600ms"}, good),
		"infer dropped at its last task", 503, func(j map[string]any) bool {
			return j["status"] == wire.StatusDropped && strings.Contains(j["error"].(string), wire.DropLastTask)
		})

	expect(do("POST", "/v2/models/oip/infer", map[string]string{wire.HeaderTimeout: "50ms"}, good),
		"infer due while its first task runs", 504, func(j map[string]any) bool { return j["status"] == wire.StatusLate })
	// A body over the limit is 413, whether its Content-Length says so or it is sent in chunks.
	big := `{"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["` + strings.Repeat("a", limit) + `"]}]}`
	expect(do("POST", "/v2/models/oip/infer", nil, big), "infer over the limit", 413, errorSays("exceeds the limit"))
	r = oipDo(t, srv.URL, "POST", "/v2/models/oip/infer", nil, io.MultiReader(strings.NewReader(big))) // no length: chunked
	expect(r, "infer over the limit, chunked", 413, errorSays("exceeds the limit"))

	// The binary tensor data extension: an FP32 input as raw bytes, the output asked for in binary.
	header := `{"id": "b1", "inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}}],` +
		` "outputs": [{"name": "score", "parameters": {"binary_data": true}}]}`
	body := append([]byte(header), wire.NewFP32("", []int64{2}, []float32{0.5, 1.5}).Data...)
	r = oipDo(t, srv.URL, "POST", "/v2/models/oip/infer", map[string]string{wire.HeaderInferenceHeaderLength: strconv.Itoa(len(header))},
		bytes.NewReader(body))
	expect(r, "infer binary", 200, func(j map[string]any) bool { return j["status"] == wire.StatusOK })
	checkBinaryScore(t, r)
	for _, tc := range []struct{ what, header, length, want string }{
		{"binary_data_size past the body", strings.Replace(header, `"binary_data_size": 8`, `"binary_data_size": 1000000000`, 1), "", "1000000000"},
		{"header length past the body", header, "100000", "the body has only"},
		{"binary bytes left over", strings.Replace(header, `"binary_data_size": 8`, `"binary_data_size": 4`, 1), "", "4 bytes of binary data follow"},
	} {
		length := tc.length
		if length == "" {
			length = strconv.Itoa(len(tc.header))
		}
		body := append([]byte(tc.header), body[len(header):]...)
		r := oipDo(t, srv.URL, "POST", "/v2/models/oip/infer", map[string]string{wire.HeaderInferenceHeaderLength: length}, bytes.NewReader(body))
		expect(r, tc.what, 400, errorSays(tc.want))
	}
}

// checkBinaryScore checks a response whose one output, score, is in the binary section.
func checkBinaryScore(t *testing.T, r oipResponse) {
	t.Helper()
	if r.header.Get(wire.HeaderContentType) != wire.ContentOctetStream {
		t.Errorf("binary response of type %q", r.header.Get(wire.HeaderContentType))
	}
	l, _ := strconv.Atoi(r.header.Get(wire.HeaderInferenceHeaderLength))
	outs, _ := r.json["outputs"].([]any)
	if len(outs) != 1 {
		t.Fatalf("binary response with outputs %v", r.json["outputs"])
	}
	out := outs[0].(map[string]any)
	params, _ := out["parameters"].(map[string]any)
	size, _ := params[wire.ParamBinaryDataSize].(float64)
	if out["data"] != nil || int(size) != 4 || len(r.body)-l != 4 {
		t.Fatalf("binary output %v with %d bytes after the header, want binary_data_size 4 and no data", out, len(r.body)-l)
	}
	score, err := wire.Tensor{Name: "score", Datatype: "FP32", Shape: []int64{1}, Data: r.body[l:]}.FP32()
	if err != nil || score[0] < 0 || score[0] >= 1 {
		t.Errorf("binary score %v, %v; want one in [0, 1)", score, err)
	}
	for _, res := range r.json["results"].([]any) {
		if res.(map[string]any)["outputs"] != nil {
			t.Errorf("results repeat the binary outputs as JSON: %v", res)
		}
	}
}
