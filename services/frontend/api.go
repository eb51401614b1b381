package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// onRequest handles a client request on NATS; every request with a reply subject gets exactly one reply.
func (f *Frontend) onRequest(m *nats.Msg) {
	if m.Reply == "" {
		f.refused.Add(1)
		f.log.Warn("discarding request without a reply subject", "subject", m.Subject)
		return
	}
	asJSON := isJSON(m.Header.Get(wire.HeaderContentType), m.Data)
	respond := func(rep *wire.InferReply) {
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
			f.log.Error("cannot encode reply", "request", rep.RequestID, "err", err)
			out.Data = []byte(err.Error())
		}
		if rep.Error != "" {
			out.Header.Set(wire.HeaderError, rep.Error)
		}
		if err := m.RespondMsg(out); err != nil {
			f.log.Warn("reply failed", "request", rep.RequestID, "err", err)
		}
	}
	pipelineName := strings.TrimPrefix(m.Subject, wire.InferPrefix)
	sub := &submission{pipeline: pipelineName, trace: bus.HeaderCarrier(m.Header), reply: respond}
	err := f.decodeNATS(m, asJSON, sub)
	if err == nil {
		err = f.submit(context.Background(), sub)
	}
	if err != nil {
		f.refused.Add(1)
		respond(&wire.InferReply{ID: sub.req.ID, Pipeline: pipelineName, Status: wire.StatusError,
			Error: err.Error(), Results: []wire.ItemResult{}})
	}
}

func (f *Frontend) decodeNATS(m *nats.Msg, asJSON bool, sub *submission) error {
	if len(m.Data) > f.cfg.MaxRequestBytes {
		return refuse(ErrBadRequest, "request of %d bytes exceeds the limit of %d", len(m.Data), f.cfg.MaxRequestBytes)
	}
	spec, _ := f.lookup(sub.pipeline)
	if spec == nil {
		return refuse(ErrUnknownPipeline, "unknown pipeline %q (serving: %s)", sub.pipeline, strings.Join(f.Pipelines(), ", "))
	}
	if asJSON {
		if err := json.Unmarshal(m.Data, &sub.req); err != nil {
			return refuse(ErrBadRequest, "request is not valid JSON: %v", err)
		}
	} else if err := wire.UnmarshalMsgpack(m.Data, &sub.req); err != nil {
		return refuse(ErrBadRequest, "request is not a msgpack InferRequest (or set %s: %s): %v",
			wire.HeaderContentType, wire.ContentJSON, err)
	}
	d, err := deadlineOf(time.Now(), m.Header.Get, spec)
	sub.deadline = d
	return err
}

// v2Response is the KServe Open Inference Protocol v2 response, extended with Sleipnir's reply fields.
type v2Response struct {
	ModelName       string        `json:"model_name"`
	Outputs         []wire.Tensor `json:"outputs"`
	wire.InferReply               // "id" (the client's), "status", "results", ...
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
	replies := make(chan *wire.InferReply, 1)
	sub := &submission{pipeline: r.PathValue("name"), trace: propagation.HeaderCarrier(r.Header),
		reply: func(rep *wire.InferReply) { replies <- rep }}
	err := f.decodeHTTP(r, sub)
	if err == nil {
		err = f.submit(r.Context(), sub)
	}
	if err != nil {
		f.refused.Add(1)
		code := http.StatusBadRequest
		switch {
		case errors.Is(err, ErrUnknownPipeline):
			code = http.StatusNotFound
		case errors.Is(err, ErrUnavailable):
			code = http.StatusServiceUnavailable
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
	if err := json.Unmarshal(body, &sub.req); err != nil {
		return refuse(ErrBadRequest, "request body is not a KServe v2 JSON request: %v", err)
	}
	d, err := deadlineOf(time.Now(), r.Header.Get, spec)
	sub.deadline = d
	return err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", wire.ContentJSON)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
