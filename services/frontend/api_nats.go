package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// The frontend's NATS API: a request on wire.InferSubject, its reply on the request's reply subject, in the
// request's encoding (schemas/README.md).

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
// on the subscription's one goroutine, so it only stamps the arrival and hands the request to the intake, or refuses
// it at once: beyond MaxInFlight, or when the intake is full.
func (f *Frontend) onRequest(m *nats.Msg) {
	arrival := time.Now()
	if m.Reply == "" {
		f.refused.Add(1)
		f.complaints.Warn("discarding request without a reply subject", "subject", m.Subject)
		return
	}
	asJSON := isJSON(m.Header.Get(wire.HeaderContentType), m.Data)
	pipelineName := strings.TrimPrefix(m.Subject, wire.InferPrefix)
	if !f.admit() {
		f.refuseNATS(m, asJSON, pipelineName, "", f.inFlightRefusal())
		return
	}
	gated, err := f.admitRequest(pipelineName, m.Header.Get, arrival)
	if err != nil {
		f.release()
		f.refuseNATS(m, asJSON, pipelineName, "", err)
		return
	}
	respond := f.natsReplier(m, asJSON)
	if !f.intake.offer(func(t *turn) { f.serveNATS(m, pipelineName, asJSON, arrival, gated, respond, t) }) {
		f.release()
		f.gateDone(pipelineName, gated, arrival, "")
		f.refuseNATS(m, asJSON, pipelineName, "", f.intakeRefusal())
	}
}

// serveNATS decodes and submits a NATS request, on an intake goroutine.
func (f *Frontend) serveNATS(m *nats.Msg, pipelineName string, asJSON bool, arrival time.Time, gated bool,
	respond func(*wire.InferReply), t *turn) {
	sub := &submission{pipeline: pipelineName, arrival: arrival, trace: bus.HeaderCarrier(m.Header), subject: m.Subject,
		reply: respond, gated: gated}
	err := f.decodeNATS(m, asJSON, sub)
	if err == nil {
		err = f.submit(context.Background(), sub, t)
	}
	// The task message carries the inputs now: a request waiting for its reply holds no payload.
	m.Data = nil
	if err != nil {
		f.release()
		f.gateDone(pipelineName, gated, arrival, "")
		f.refuseNATS(m, asJSON, pipelineName, sub.req.ID, err)
	}
}

func (f *Frontend) refuseNATS(m *nats.Msg, asJSON bool, pipelineName, clientID string, err error) {
	f.noteRefusal(pipelineName, err)
	f.replyNATS(m, asJSON, &wire.InferReply{ID: clientID, Pipeline: pipelineName, Status: refusalStatus(err),
		Error: err.Error(), Results: []wire.ItemResult{}}, err)
}

// natsReplier returns the function that gives an admitted NATS request's place in flight back and sends its reply,
// in the request's encoding: in that order, so that a client's next request, sent on this reply, finds the place.
func (f *Frontend) natsReplier(m *nats.Msg, asJSON bool) func(*wire.InferReply) {
	return func(rep *wire.InferReply) {
		f.release()
		f.replyNATS(m, asJSON, rep, nil)
	}
}

// replyNATS sends a NATS request's reply; refusal is why it was refused, if it was.
func (f *Frontend) replyNATS(m *nats.Msg, asJSON bool, rep *wire.InferReply, refusal error) {
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
	if rep.Status == wire.StatusError || rep.Status == wire.StatusOverloaded {
		setServiceError(out.Header, rep, refusal)
	}
	if err := m.RespondMsg(out); err != nil {
		f.replyFailures.Add(1)
		f.complaints.Warn("reply failed", "request", rep.RequestID, "err", err)
	}
	f.micro.replied(pipelineOf(m.Subject), rep)
}

func (f *Frontend) decodeNATS(m *nats.Msg, asJSON bool, sub *submission) error {
	spec, _ := f.lookup(sub.pipeline)
	if spec == nil {
		return f.unknownPipeline(sub.pipeline)
	}
	var err error
	sub.oip, sub.deadline, err = decodeRequest(m.Data, asJSON, m.Header.Get, sub.arrival, spec,
		f.cfg.MaxRequestBytes, f.maxAhead(spec), "request is not valid JSON")
	sub.req = sub.oip.InferRequest
	return err
}
