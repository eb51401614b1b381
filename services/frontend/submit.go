// From a client request to its root task message: the deadline, decoding, and publishing into JetStream.

package frontend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/telemetry"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// request is one accepted request, pending until complete or due.
type request struct {
	id       string
	clientID string
	pipeline string
	start    time.Time
	deadline time.Time
	tracker  *completion.Tracker
	timer    *time.Timer
	reply    func(*wire.InferReply)
	span     trace.Span
	// enqueued: JetStream acknowledged the root task message (a request answered late before is not watched: late.go).
	enqueued atomic.Bool
	gated    bool // admission control counts it in flight until its reply (admission.go)
	// joins holds the parts of its join tasks' items (join.go), under the frontend's mu.
	joins map[string]*joinWait
	// rootVariant is the root variant it was sent to (routing_mode ramsis counts the requests in flight there).
	rootVariant string
}

// submission is a decoded client request, whatever API it came through.
type submission struct {
	pipeline string
	req      wire.InferRequest
	oip      wire.OIPRequest // the request as decoded, with the outputs asked for (JSON requests)
	arrival  time.Time       // when the frontend received it: its deadline runs from here
	deadline time.Time
	trace    propagation.TextMapCarrier
	subject  string // the NATS subject it came on; "" for HTTP
	// httpRoute is the pattern an HTTP request matched ("[METHOD ]/v2/models/{name}/infer"), for its span.
	httpRoute string
	reply     func(*wire.InferReply)
	gated     bool // admission control counts it in flight (admission.go)
}

// Error kinds of refused requests; the HTTP API maps them to status codes.
var (
	ErrBadRequest      = errors.New("bad request")
	ErrTooLarge        = errors.New("request too large")
	ErrUnknownPipeline = errors.New("unknown pipeline")
	ErrUnavailable     = errors.New("unavailable")
	// ErrOverloaded: the frontend had no room for the request, or it waited past its deadline; retry later.
	ErrOverloaded = errors.New("overloaded")
	// ErrInternal: the frontend failed the request itself (its task message was taken for a duplicate).
	ErrInternal = errors.New("internal error")
)

// refusal is an error reply to a request that was never sent into the pipeline.
type refusal struct {
	kind error
	msg  string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(kind error, format string, args ...any) *refusal {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// maxAhead is how far ahead of its arrival a request's deadline may be.
func (f *Frontend) maxAhead(spec *pipeline.Spec) time.Duration {
	if f.cfg.MaxTimeout > 0 {
		return f.cfg.MaxTimeout
	}
	return min(max(DefaultMaxTimeout, time.Duration(10*spec.SLOMs*float64(time.Millisecond))), maxMaxTimeout)
}

// deadlineOf reads the request's deadline from its headers: absolute (wire.HeaderDeadline), relative to its arrival
// (wire.HeaderTimeout), or the pipeline's SLO from its arrival. A deadline more than maxAhead after the arrival is
// refused: the request would hold its place in the frontend for that long, and past 2262 it cannot even be written.
func deadlineOf(arrival time.Time, get func(string) string, spec *pipeline.Spec, maxAhead time.Duration) (time.Time, error) {
	if s := get(wire.HeaderDeadline); s != "" {
		d, err := wire.ParseDeadline(s)
		if err != nil {
			return time.Time{}, refuse(ErrBadRequest, "%v", err)
		}
		if !d.After(arrival) {
			return time.Time{}, refuse(ErrBadRequest, "deadline %s has already passed", d.UTC().Format(time.RFC3339Nano))
		}
		if d.Sub(arrival) > maxAhead {
			return time.Time{}, refuse(ErrBadRequest, "%s %s is further ahead than the limit of %v",
				wire.HeaderDeadline, d.UTC().Format(time.RFC3339Nano), maxAhead)
		}
		return d, nil
	}
	if s := get(wire.HeaderTimeout); s != "" {
		d, err := wire.ParseTimeout(s)
		if err != nil {
			return time.Time{}, refuse(ErrBadRequest, "%v", err)
		}
		if d <= 0 {
			return time.Time{}, refuse(ErrBadRequest, "%s %s: the deadline has already passed", wire.HeaderTimeout, s)
		}
		if d > maxAhead {
			return time.Time{}, refuse(ErrBadRequest, "%s %s is further ahead than the limit of %v", wire.HeaderTimeout, s, maxAhead)
		}
		return arrival.Add(d), nil
	}
	return arrival.Add(time.Duration(spec.SLOMs * float64(time.Millisecond))), nil
}

// decodeRequest turns a request's payload and headers into what submit needs, or a refusal saying what is wrong. It
// is pure (no NATS, no clock): NATS and HTTP requests go through it, and FuzzDecodeRequest drives it. JSON is the
// OIP's, with its binary extension when the header wire.HeaderInferenceHeaderLength says where the JSON ends.
// badJSON opens the error for a payload that is not JSON (the two APIs word it differently).
func decodeRequest(data []byte, asJSON bool, header func(string) string, arrival time.Time, spec *pipeline.Spec,
	maxBytes int, maxAhead time.Duration, badJSON string) (wire.OIPRequest, time.Time, error) {
	var oip wire.OIPRequest
	req := &oip.InferRequest
	if len(data) > maxBytes {
		return oip, time.Time{}, refuse(ErrTooLarge, "request of %d bytes exceeds the limit of %d", len(data), maxBytes)
	}
	if asJSON {
		head, binarySection, err := wire.SplitBinaryBody(data, header(wire.HeaderInferenceHeaderLength))
		if err == nil {
			oip, err = wire.DecodeOIPRequest(head, binarySection)
		}
		if err != nil {
			return oip, time.Time{}, refuse(ErrBadRequest, "%s: %v", badJSON, err)
		}
	} else if err := wire.UnmarshalMsgpack(data, req); err != nil {
		return oip, time.Time{}, refuse(ErrBadRequest, "request is not a msgpack InferRequest (or set %s: %s): %v",
			wire.HeaderContentType, wire.ContentJSON, err)
	}
	if len(req.Inputs) == 0 {
		return oip, time.Time{}, refuse(ErrBadRequest, "request has no inputs")
	}
	// The check every worker makes of a root task message too (a task message may come from elsewhere).
	if err := spec.CheckInputs(req.Inputs); err != nil {
		return oip, time.Time{}, refuse(ErrBadRequest, "%v", err)
	}
	d, err := deadlineOf(arrival, header, spec, maxAhead)
	return oip, d, err
}

// submit sends an accepted request into the pipeline, in its turn, or returns why it was refused. On success,
// sub.reply is called exactly once, later. The publish is bounded by the request's deadline.
func (f *Frontend) submit(ctx context.Context, sub *submission, t *turn) error {
	root, variant, err := f.rootVariant(sub)
	if err != nil {
		return err
	}
	r := &request{
		id: wire.RequestID(f.cfg.ID, f.boot, f.seq.Add(1)), clientID: sub.req.ID, pipeline: sub.pipeline,
		start: sub.arrival, deadline: sub.deadline, tracker: completion.New(), reply: sub.reply, gated: sub.gated,
	}
	spanCtx := f.startRequestSpan(ctx, sub, r)
	msg, send, err := f.rootMessage(spanCtx, sub, r, root, variant)
	if err != nil {
		r.span.End()
		return err
	}

	// Register before publishing: a fast worker may report before the publish returns. From here the deadline timer
	// guarantees the reply, whatever becomes of the task message.
	f.mu.Lock()
	f.demand[sub.pipeline]++
	f.noteGap(sub.pipeline)
	f.pending[r.id] = r
	r.rootVariant = variant
	f.sentToRoot(sub.pipeline, variant, 1)
	r.timer = time.AfterFunc(time.Until(r.deadline), func() { f.expire(r.id) })
	f.mu.Unlock()
	return f.enqueue(ctx, r, msg, send, t)
}

// rootVariant checks that sub can be served now (its pipeline known and planned, its deadline ahead), and picks
// the variant of the pipeline's root task that takes it, by the plan's routing.
func (f *Frontend) rootVariant(sub *submission) (root, variant string, err error) {
	spec, p := f.lookup(sub.pipeline)
	if spec == nil {
		return "", "", f.unknownPipeline(sub.pipeline)
	}
	if p == nil {
		return "", "", refuse(ErrUnavailable, "pipeline %q has no plan yet", sub.pipeline)
	}
	now := time.Now()
	if !sub.deadline.After(now) {
		return "", "", refuse(ErrOverloaded, "overloaded: the request waited %v in the frontend, past its deadline; retry later",
			now.Sub(sub.arrival).Round(time.Millisecond))
	}
	root = spec.Root().Name
	f.mu.Lock()
	variant = plan.Pick(p.Routing.Root, f.rng.Float64())
	if v, ok := f.rootByPolicy(spec, p, sub.deadline); ok { // routing_mode ramsis (rootpolicy.go)
		variant = v
	}
	f.mu.Unlock()
	if variant == "" {
		// A plan that hosts nothing, read since admitRequest refused those of the plan before it.
		return "", "", refuse(ErrOverloaded, "overloaded: the plan in force gives pipeline %s no server for task %s; "+
			"retry in a few seconds", sub.pipeline, root)
	}
	return root, variant, nil
}

// rootMessage is the task message carrying r's inputs (sub's) to root/variant, and its "send" span (a child of
// spanCtx's), whose context the message carries.
func (f *Frontend) rootMessage(spanCtx context.Context, sub *submission, r *request, root, variant string) (*nats.Msg,
	trace.Span, error) {
	msg := nats.NewMsg(wire.TaskSubject(sub.pipeline, root, variant))
	msg.Data = wire.AppendTaskMessage(nil, &wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1,
		Inputs: sub.req.Inputs}}})
	msgID := wire.TaskMsgID(r.id, "", root, variant)
	wire.TaskHeaders{RequestID: r.id, Deadline: r.deadline, ReplyTo: f.result, MsgID: msgID}.Write(msg.Header.Set)
	send := telemetry.StartSend(spanCtx, f.tracer, msg.Subject, bus.HeaderCarrier(msg.Header),
		semconv.MessagingMessageID(msgID), telemetry.AttrTask.String(root), telemetry.AttrVariant.String(variant))
	return msg, send, nil
}

// enqueue publishes r's task message (msg, its "send" span send), bounded by r's deadline. A request whose
// deadline comes first is answered late, as its timer does; one refused is taken out of the pending requests
// again, unless already answered.
func (f *Frontend) enqueue(ctx context.Context, r *request, msg *nats.Msg, send trace.Span, t *turn) error {
	pubCtx, cancel := context.WithDeadline(ctx, r.deadline)
	defer cancel()
	defer context.AfterFunc(f.stopping, cancel)()
	ack, err := f.publish(pubCtx, msg, t)
	if err != nil {
		send.SetStatus(codes.Error, err.Error())
	}
	send.End()
	if err != nil && errors.Is(pubCtx.Err(), context.DeadlineExceeded) {
		// The deadline came first: answer as its timer does (late), whichever of the two got here first.
		r.timer.Stop()
		f.expire(r.id)
		return nil
	}
	if err == nil && ack.Duplicate {
		// The stream kept an earlier message with this id and dropped this one: no worker will ever see it.
		err = refuse(ErrInternal, "request %s: the stream took its task message for a duplicate of one it already "+
			"holds (%s %q), so it was not enqueued", r.id, wire.HeaderMsgID, msg.Header.Get(wire.HeaderMsgID))
	} else if err != nil && f.stopping.Err() != nil {
		err = refuse(ErrUnavailable, "the frontend is shutting down")
	} else if err != nil {
		err = refuse(ErrUnavailable, "cannot enqueue request on %s: %v", msg.Subject, err)
	}
	if err != nil {
		f.mu.Lock()
		_, still := f.pending[r.id]
		delete(f.pending, r.id)
		if still {
			f.sentToRoot(r.pipeline, r.rootVariant, -1)
		}
		f.mu.Unlock()
		r.timer.Stop()
		r.span.End()
		if !still {
			return nil // already answered (the deadline passed during the publish)
		}
		return err
	}
	r.enqueued.Store(true)
	f.accepted.Add(1)
	return nil
}

// startRequestSpan starts r's span, a child of the client's trace context if it sent one: for a NATS request the
// "process" span of its message (messaging conventions), for HTTP the server span of its route.
func (f *Frontend) startRequestSpan(ctx context.Context, sub *submission, r *request) context.Context {
	opts := []trace.SpanStartOption{trace.WithTimestamp(sub.arrival),
		trace.WithAttributes(telemetry.AttrPipeline.String(sub.pipeline), telemetry.AttrRequestID.String(r.id))}
	if sub.subject != "" {
		ctx, r.span = telemetry.StartProcess(ctx, f.tracer, sub.subject, wire.QueueFrontend, sub.trace, opts...)
		return ctx
	}
	route := sub.httpRoute
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path
	}
	ctx, r.span = f.tracer.Start(otel.GetTextMapPropagator().Extract(ctx, sub.trace), http.MethodPost+" "+route,
		append(opts, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			semconv.HTTPRequestMethodPost, semconv.HTTPRoute(route)))...)
	return ctx
}

// publish sends msg in its turn and waits for JetStream's acknowledgement until ctx ends (the request's deadline).
// While the stream has no leader (a node lost, an election under way), the same message is sent again until the
// new leader takes it or the deadline passes (bus.PublishAsync): the turn passes after the first send, so the
// requests behind are not held. Stalled (too many acknowledgements outstanding), give up soon: the turn is held.
func (f *Frontend) publish(ctx context.Context, msg *nats.Msg, t *turn) (*jetstream.PubAck, error) {
	if !t.take(ctx) {
		return nil, ctx.Err()
	}
	return bus.PublishAsync(ctx, f.js, msg, t.pass, jetstream.WithStallWait(publishStallWait))
}
