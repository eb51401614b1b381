package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// isJSON decides a payload's encoding: the Content-Type header if given, else JSON when it starts with '{'.
func isJSON(contentType string, data []byte) bool {
	switch {
	case strings.HasPrefix(contentType, wire.ContentJSON):
		return true
	case strings.HasPrefix(contentType, wire.ContentMsgpack):
		return false
	}
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// onRequest handles a client request on NATS; every request with a reply subject gets exactly one reply. It runs
// on the subscription's one goroutine, so it only stamps the arrival and hands the request to the intake.
func (f *Frontend) onRequest(m *nats.Msg) {
	arrival := time.Now()
	if m.Reply == "" {
		f.refused.Add(1)
		f.complaints.Warn("discarding request without a reply subject", "subject", m.Subject)
		return
	}
	asJSON := isJSON(m.Header.Get(wire.HeaderContentType), m.Data)
	respond := f.natsReplier(m, asJSON)
	pipelineName := strings.TrimPrefix(m.Subject, wire.InferPrefix)
	if !f.intake.offer(func(t *turn) { f.serveNATS(m, pipelineName, asJSON, arrival, respond, t) }) {
		f.refuseNATS(respond, pipelineName, "", f.intakeRefusal())
	}
}

// serveNATS decodes and submits a NATS request, on an intake goroutine.
func (f *Frontend) serveNATS(m *nats.Msg, pipelineName string, asJSON bool, arrival time.Time,
	respond func(*wire.InferReply), t *turn) {
	sub := &submission{pipeline: pipelineName, arrival: arrival, trace: bus.HeaderCarrier(m.Header), subject: m.Subject,
		reply: respond}
	err := f.decodeNATS(m, asJSON, sub)
	if err == nil {
		err = f.submit(context.Background(), sub, t)
	}
	if err != nil {
		f.refuseNATS(respond, pipelineName, sub.req.ID, err)
	}
}

func (f *Frontend) refuseNATS(respond func(*wire.InferReply), pipelineName, clientID string, err error) {
	f.noteRefusal(pipelineName, err)
	respond(&wire.InferReply{ID: clientID, Pipeline: pipelineName, Status: wire.StatusError,
		Error: err.Error(), Results: []wire.ItemResult{}})
}

// natsReplier returns the function that sends a NATS request's reply, in the request's encoding.
func (f *Frontend) natsReplier(m *nats.Msg, asJSON bool) func(*wire.InferReply) {
	return func(rep *wire.InferReply) {
		out := nats.NewMsg(m.Reply)
		var err error
		if asJSON {
			out.Header.Set(wire.HeaderContentType, wire.ContentJSON)
			out.Data, err = json.Marshal(rep)
		} else {
			out.Header.Set(wire.HeaderContentType, wire.ContentMsgpack)
			out.Data, err = msgpack.Marshal(rep)
		}
		if err != nil {
			f.replyFailures.Add(1)
			f.complaints.Error("cannot encode reply", "request", rep.RequestID, "err", err)
			out.Data = []byte(err.Error())
		}
		if rep.Error != "" {
			out.Header.Set(wire.HeaderError, rep.Error)
		}
		if rep.TraceID != "" {
			out.Header.Set(wire.HeaderTraceID, rep.TraceID)
		}
		if err := m.RespondMsg(out); err != nil {
			f.replyFailures.Add(1)
			f.complaints.Warn("reply failed", "request", rep.RequestID, "err", err)
		}
	}
}

// intakeRefusal is why the intake did not take a request.
func (f *Frontend) intakeRefusal() error {
	if f.intake.isClosed() {
		return refuse(ErrUnavailable, "the frontend is shutting down")
	}
	return refuse(ErrOverloaded, "overloaded: %d requests are already waiting in the frontend; retry later", f.cfg.IntakeQueue)
}

// Log keys of refusals, by kind: a bounded set, each rate-limited on its own.
var refusalLogKeys = []struct {
	kind  error
	key   string
	level slog.Level
}{
	{ErrBadRequest, "refused a bad request", slog.LevelWarn},
	{ErrUnknownPipeline, "refused a request for an unknown pipeline", slog.LevelWarn},
	{ErrOverloaded, "refused a request: overloaded", slog.LevelWarn},
	{ErrUnavailable, "refused a request: unavailable", slog.LevelError},
	{ErrInternal, "refused a request: internal error", slog.LevelError},
}

// noteRefusal counts a refusal and logs it, rate-limited.
func (f *Frontend) noteRefusal(pipelineName string, err error) {
	f.refused.Add(1)
	if errors.Is(err, ErrOverloaded) {
		f.overloaded.Add(1)
	}
	key, level := "refused a request", slog.LevelWarn
	for _, k := range refusalLogKeys {
		if errors.Is(err, k.kind) {
			key, level = k.key, k.level
			break
		}
	}
	f.complaints.Log(level, key, "pipeline", pipelineName, "err", err)
}

func (f *Frontend) decodeNATS(m *nats.Msg, asJSON bool, sub *submission) error {
	spec, _ := f.lookup(sub.pipeline)
	if spec == nil {
		return refuse(ErrUnknownPipeline, "unknown pipeline %q (serving: %s)", sub.pipeline, strings.Join(f.Pipelines(), ", "))
	}
	var err error
	sub.req, sub.deadline, err = decodeRequest(m.Data, asJSON, m.Header.Get, sub.arrival, spec,
		f.cfg.MaxRequestBytes, f.maxAhead(spec), "request is not valid JSON")
	return err
}

// v2Response is the KServe Open Inference Protocol v2 response, extended with Sleipnir's reply fields.
type v2Response struct {
	ModelName       string         `json:"model_name"`
	Outputs         []wire.Tensor  `json:"outputs"`
	Parameters      map[string]any `json:"parameters,omitempty"` // "trace_id"
	wire.InferReply                // "id" (the client's), "status", "results", ...
}

type v2Error struct {
	Error string `json:"error"`
}

// Handler is the KServe v2 HTTP API.
func (f *Frontend) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, _ *http.Request) {
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
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /v2/models/{name}", func(w http.ResponseWriter, r *http.Request) {
		spec, _ := f.lookup(r.PathValue("name"))
		if spec == nil {
			writeJSON(w, http.StatusNotFound, v2Error{fmt.Sprintf("unknown pipeline %q", r.PathValue("name"))})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"name": spec.Name, "platform": "sleipnir", "versions": []string{},
			"inputs": []any{}, "outputs": []any{}})
	})
	mux.HandleFunc("GET /v2/models/{name}/ready", func(w http.ResponseWriter, r *http.Request) {
		if spec, p := f.lookup(r.PathValue("name")); spec == nil || p == nil {
			writeJSON(w, http.StatusServiceUnavailable, v2Error{"not ready"})
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /v2/models/{name}/infer", f.serveInfer)
	return mux
}

func (f *Frontend) httpServer() *http.Server {
	return &http.Server{Addr: f.cfg.HTTPAddr, Handler: f.Handler(), ReadHeaderTimeout: 10 * time.Second}
}

func (f *Frontend) serveInfer(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	replies := make(chan *wire.InferReply, 1)
	sub := &submission{pipeline: r.PathValue("name"), arrival: arrival, trace: propagation.HeaderCarrier(r.Header),
		httpRoute: r.Pattern, reply: func(rep *wire.InferReply) { replies <- rep }}
	err := f.decodeHTTP(r, sub)
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
		f.noteRefusal(sub.pipeline, err)
		code := http.StatusBadRequest
		switch {
		case errors.Is(err, ErrUnknownPipeline):
			code = http.StatusNotFound
		case errors.Is(err, ErrOverloaded):
			code = http.StatusTooManyRequests
		case errors.Is(err, ErrUnavailable):
			code = http.StatusServiceUnavailable
		case errors.Is(err, ErrInternal):
			code = http.StatusInternalServerError
		}
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			w.Header().Set(wire.HeaderRetryAfter, "1")
		}
		writeJSON(w, code, v2Error{err.Error()})
		return
	}
	rep := <-replies // submit guarantees exactly one reply, at the deadline at the latest
	resp := v2Response{ModelName: sub.pipeline, Outputs: []wire.Tensor{}, InferReply: *rep}
	for _, leaf := range rep.Results {
		for _, t := range leaf.Outputs {
			t.Name = leaf.ID + "/" + t.Name
			resp.Outputs = append(resp.Outputs, t)
		}
	}
	if rep.TraceID != "" {
		w.Header().Set(wire.HeaderTraceID, rep.TraceID)
		resp.Parameters = map[string]any{"trace_id": rep.TraceID}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (f *Frontend) decodeHTTP(r *http.Request, sub *submission) error {
	spec, _ := f.lookup(sub.pipeline)
	if spec == nil {
		return refuse(ErrUnknownPipeline, "unknown pipeline %q (serving: %s)", sub.pipeline, strings.Join(f.Pipelines(), ", "))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(f.cfg.MaxRequestBytes)+1))
	if err != nil {
		return refuse(ErrBadRequest, "reading request body: %v", err)
	}
	if len(body) > f.cfg.MaxRequestBytes {
		return refuse(ErrBadRequest, "request body exceeds the limit of %d bytes", f.cfg.MaxRequestBytes)
	}
	sub.req, sub.deadline, err = decodeRequest(body, true, r.Header.Get, sub.arrival, spec,
		f.cfg.MaxRequestBytes, f.maxAhead(spec), "request body is not a KServe v2 JSON request")
	return err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set(wire.HeaderContentType, wire.ContentJSON)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
