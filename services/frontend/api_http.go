package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sleipnir-serving/sleipnir/pkg/buildinfo"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// The frontend's HTTP API is the KServe Open Inference Protocol v2 (OIP) with its binary tensor data extension;
// docs/http.md documents it, and TestHTTPConformance replays it.

// modelVersion is the one version of every pipeline: a pipeline is replaced, not versioned, in the KV bucket.
const modelVersion = "1"

// v2Response is the OIP inference response, extended with Sleipnir's reply fields. Outputs holds tensors, or
// their headers when their data is in the binary section.
type v2Response struct {
	ModelName       string         `json:"model_name"`
	ModelVersion    string         `json:"model_version"`
	Outputs         []any          `json:"outputs"`
	Parameters      map[string]any `json:"parameters,omitempty"` // "trace_id"
	wire.InferReply                // "id" (the client's), "status", "results", "error" unless ok, ...
}

type v2Error struct {
	Error string `json:"error"`
}

// v2Tensor is a tensor's OIP metadata.
type v2Tensor struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// Handler is the OIP HTTP API. Every answer is JSON, errors {"error": "..."}, also for unknown paths and methods.
func (f *Frontend) Handler() http.Handler {
	mux := http.NewServeMux()
	handle := func(method, pattern string, h http.HandlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
				w.Header().Set("Allow", method)
				writeJSON(w, http.StatusMethodNotAllowed, v2Error{fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, method)})
				return
			}
			h(w, r)
		})
	}
	handle(http.MethodGet, "/v2", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"name": "sleipnir", "version": buildinfo.Version(),
			"extensions": []string{wire.ExtensionBinaryTensorData}})
	})
	handle(http.MethodGet, "/v2/health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})
	handle(http.MethodGet, "/v2/health/ready", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-f.ready:
		default:
			writeJSON(w, http.StatusServiceUnavailable, v2Error{"loading pipelines"})
			return
		}
		if !f.nc.IsConnected() || len(f.Pipelines()) == 0 {
			writeJSON(w, http.StatusServiceUnavailable, v2Error{"not connected to NATS, or no pipeline has a plan"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
	})
	for _, prefix := range []string{"/v2/models/{name}", "/v2/models/{name}/versions/{version}"} {
		handle(http.MethodGet, prefix, f.serveModelMetadata)
		handle(http.MethodGet, prefix+"/ready", f.serveModelReady)
		handle(http.MethodPost, prefix+"/infer", f.serveInfer)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, v2Error{fmt.Sprintf("no endpoint %s (the API is under /v2)", r.URL.Path)})
	})
	return mux
}

// model finds the pipeline a model path names, or answers 404 and returns nil.
func (f *Frontend) model(w http.ResponseWriter, r *http.Request) (*pipeline.Spec, *plan.Plan) {
	name := r.PathValue("name")
	spec, p := f.lookup(name)
	if spec == nil {
		writeJSON(w, http.StatusNotFound, v2Error{f.unknownPipeline(name).Error()})
		return nil, nil
	}
	if v := r.PathValue("version"); v != "" && v != modelVersion {
		writeJSON(w, http.StatusNotFound, v2Error{fmt.Sprintf("model %q has no version %q (versions: %s)", name, v, modelVersion)})
		return nil, nil
	}
	return spec, p
}

func (f *Frontend) serveModelMetadata(w http.ResponseWriter, r *http.Request) {
	spec, _ := f.model(w, r)
	if spec == nil {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": spec.Name, "versions": []string{modelVersion},
		"platform": "sleipnir", "inputs": v2Tensors(spec.Inputs), "outputs": v2Tensors(spec.Outputs)})
}

func v2Tensors(ts []pipeline.TensorSpec) []v2Tensor {
	out := make([]v2Tensor, len(ts))
	for i, t := range ts {
		out[i] = v2Tensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		if out[i].Shape == nil {
			out[i].Shape = []int64{}
		}
	}
	return out
}

func (f *Frontend) serveModelReady(w http.ResponseWriter, r *http.Request) {
	spec, p := f.model(w, r)
	switch {
	case spec == nil:
	case p == nil:
		writeJSON(w, http.StatusServiceUnavailable, v2Error{fmt.Sprintf("pipeline %q has no plan yet", spec.Name)})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"name": spec.Name, "ready": true})
	}
}

func (f *Frontend) unknownPipeline(name string) error {
	return refuse(ErrUnknownPipeline, "unknown pipeline %q (serving: %s)", name, strings.Join(f.Pipelines(), ", "))
}

func (f *Frontend) httpServer() *http.Server {
	return &http.Server{Addr: f.cfg.HTTPAddr, Handler: f.Handler(), ReadHeaderTimeout: 10 * time.Second}
}

func (f *Frontend) serveInfer(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	if v := r.PathValue("version"); v != "" && v != modelVersion {
		f.model(w, r) // answers 404: no such pipeline, or version
		return
	}
	if !f.admit() {
		// Before the body is read: a refusal costs the frontend next to nothing.
		f.refuseHTTP(w, r.PathValue("name"), f.inFlightRefusal())
		return
	}
	defer f.release()
	replies := make(chan *wire.InferReply, 1)
	sub := &submission{pipeline: r.PathValue("name"), arrival: arrival, trace: propagation.HeaderCarrier(r.Header),
		httpRoute: r.Pattern, reply: func(rep *wire.InferReply) { replies <- rep }}
	gated, err := f.admitRequest(sub.pipeline, r.Header.Get, arrival)
	if err != nil {
		f.refuseHTTP(w, sub.pipeline, err) // before the body is read, as above
		return
	}
	sub.gated = gated
	err = f.decodeHTTP(w, r, sub)
	if err == nil {
		// Publish through the intake too: it bounds the publishes in flight, whatever API they came through.
		submitted := make(chan error, 1)
		if f.intake.offer(func(t *turn) { submitted <- f.submit(r.Context(), sub, t) }) {
			err = <-submitted
		} else {
			err = f.intakeRefusal()
		}
	}
	if err != nil {
		f.gateDone(sub.pipeline, gated, arrival, "")
		f.refuseHTTP(w, sub.pipeline, err)
		return
	}
	// The task message carries the inputs now: a request waiting for its reply holds no payload.
	sub.req.Inputs, sub.oip.Inputs = nil, nil
	rep := <-replies // submit guarantees exactly one reply, at the deadline at the latest
	writeInferResponse(w, sub, rep)
}

// refuseHTTP answers a refused HTTP request with its status and error (and Retry-After when load is the cause).
func (f *Frontend) refuseHTTP(w http.ResponseWriter, pipelineName string, err error) {
	f.noteRefusal(pipelineName, err)
	code, retry := httpStatus(nil, err)
	if retry {
		w.Header().Set(wire.HeaderRetryAfter, "1")
	}
	writeJSON(w, code, v2Error{err.Error()})
}

// writeInferResponse answers an accepted request: its outputs (each leaf's, named "<leaf id>/<name>"), in JSON or
// in the binary section as asked, and the HTTP status its reply's status maps to.
func writeInferResponse(w http.ResponseWriter, sub *submission, rep *wire.InferReply) {
	resp := v2Response{ModelName: sub.pipeline, ModelVersion: modelVersion, Outputs: []any{}, InferReply: *rep}
	var binarySection [][]byte
	for _, leaf := range rep.Results {
		for _, t := range leaf.Outputs {
			if !sub.oip.Wants(t.Name) {
				continue
			}
			binaryOut := sub.oip.BinaryOutput(t.Name)
			t.Name = leaf.ID + "/" + t.Name
			if binaryOut {
				resp.Outputs = append(resp.Outputs, t.BinaryHeader())
				binarySection = append(binarySection, t.Data)
			} else {
				resp.Outputs = append(resp.Outputs, t)
			}
		}
	}
	if len(binarySection) > 0 {
		// The data is in the binary section: the results would carry it a second time, as JSON.
		resp.Results = make([]wire.ItemResult, len(rep.Results))
		for i, leaf := range rep.Results {
			leaf.Outputs = nil
			resp.Results[i] = leaf
		}
	}
	if rep.TraceID != "" {
		w.Header().Set(wire.HeaderTraceID, rep.TraceID)
		resp.Parameters = map[string]any{"trace_id": rep.TraceID}
	}
	code, retry := httpStatus(rep, nil)
	if code != http.StatusOK && resp.Error == "" {
		resp.Error = replyError(rep)
	}
	if retry {
		w.Header().Set(wire.HeaderRetryAfter, "1")
	}
	if len(binarySection) == 0 {
		writeJSON(w, code, resp)
		return
	}
	header, err := json.Marshal(resp)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, v2Error{fmt.Sprintf("encode response: %v", err)})
		return
	}
	w.Header().Set(wire.HeaderContentType, wire.ContentOctetStream)
	w.Header().Set(wire.HeaderInferenceHeaderLength, strconv.Itoa(len(header)))
	w.WriteHeader(code)
	_, _ = w.Write(header)
	for _, b := range binarySection {
		_, _ = w.Write(b)
	}
}

// replyError says why a reply is not ok, from its leaves' reasons.
func replyError(rep *wire.InferReply) string {
	reasons := map[string]int{}
	var order []string
	for _, leaf := range rep.Results {
		if leaf.Status == wire.ItemOK {
			continue
		}
		key := leaf.Status
		if leaf.Reason != "" {
			key += ": " + leaf.Reason
		}
		if reasons[key] == 0 {
			order = append(order, key)
		}
		reasons[key]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d %s", reasons[k], k)
	}
	msg := "request " + rep.Status
	if rep.Status == wire.StatusLate {
		msg += " (the deadline passed before every leaf finished)"
	}
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, ", ")
	}
	return msg
}

// httpStatus maps what became of a request to its HTTP status: a refusal (err, before the request was sent into
// the pipeline) or a reply's status. retry: the response carries Retry-After (the cause is load, not the request).
// docs/http.md has the same table.
func httpStatus(rep *wire.InferReply, err error) (code int, retry bool) {
	if err != nil {
		for _, k := range []struct {
			kind  error
			code  int
			retry bool
		}{
			{ErrBadRequest, http.StatusBadRequest, false},
			{ErrTooLarge, http.StatusRequestEntityTooLarge, false},
			{ErrUnknownPipeline, http.StatusNotFound, false},
			{ErrOverloaded, http.StatusTooManyRequests, true},
			{ErrUnavailable, http.StatusServiceUnavailable, true},
			{ErrInternal, http.StatusInternalServerError, false},
		} {
			if errors.Is(err, k.kind) {
				return k.code, k.retry
			}
		}
		return http.StatusInternalServerError, false
	}
	switch rep.Status {
	case wire.StatusOK, wire.StatusDegraded:
		// Degraded: every item answered in time, some with an earlier task's result (the body says which).
		return http.StatusOK, false
	case wire.StatusPartial, wire.StatusDropped:
		// Leaves were dropped: the pipeline had no capacity for them in time (the body holds what finished).
		return http.StatusServiceUnavailable, true
	case wire.StatusLate:
		return http.StatusGatewayTimeout, false
	case wire.StatusOverloaded:
		return http.StatusTooManyRequests, true
	case wire.StatusError:
		if rep.Error != "" {
			// The frontend failed the request itself (it is shutting down).
			return http.StatusServiceUnavailable, true
		}
		// Every leaf failed in its model (such as an image that does not decode).
		return http.StatusUnprocessableEntity, false
	}
	return http.StatusInternalServerError, false
}

// decodeHTTP reads and decodes an infer request's body. A body over the limit is refused before it is read (by its
// Content-Length) or as soon as the limit is passed.
func (f *Frontend) decodeHTTP(w http.ResponseWriter, r *http.Request, sub *submission) error {
	spec, _ := f.lookup(sub.pipeline)
	if spec == nil {
		return f.unknownPipeline(sub.pipeline)
	}
	limit := int64(f.cfg.MaxRequestBytes)
	if r.ContentLength > limit {
		return refuse(ErrTooLarge, "request body of %d bytes exceeds the limit of %d bytes", r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return refuse(ErrTooLarge, "request body exceeds the limit of %d bytes", limit)
		}
		return refuse(ErrBadRequest, "reading request body: %v", err)
	}
	sub.oip, sub.deadline, err = decodeRequest(body, true, r.Header.Get, sub.arrival, spec,
		f.cfg.MaxRequestBytes, f.maxAhead(spec), "request body is not a KServe v2 JSON request")
	sub.req = sub.oip.InferRequest
	return err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set(wire.HeaderContentType, wire.ContentJSON)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
