// Package frontend is the frontend service: it accepts requests on NATS (request-reply on wire.InferPrefix+pipeline)
// and HTTP (KServe v2), sends each to the root task's variant the routing table picks, collects the leaves the
// workers report, and replies exactly once: when every leaf is in, or at the deadline, whichever comes first.
package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/catalog"
)

// Config is the frontend's configuration.
type Config struct {
	// ID names the frontend in its result subject; default: hostname-pid.
	ID string
	// HTTPAddr is where the KServe v2 HTTP API listens ("" disables it).
	HTTPAddr string
	// MaxRequestBytes refuses larger request payloads with an error reply.
	MaxRequestBytes int
	// DemandEvery is how often the frontend reports its accepted requests to the planner (default 1 s).
	DemandEvery time.Duration
	// IntakeWorkers is how many requests are decoded and published at once (default DefaultIntakeWorkers): the
	// bound on publishes in flight.
	IntakeWorkers int
	// IntakeQueue is how many requests may wait for an intake worker (default DefaultIntakeQueue); beyond it a
	// request is refused at once as overloaded.
	IntakeQueue int
	// MaxTimeout is the furthest ahead a request's deadline may be (Sleipnir-Timeout or Sleipnir-Deadline); further
	// is refused. Default: the larger of DefaultMaxTimeout and 10 times the pipeline's SLO. At most 24 h.
	MaxTimeout time.Duration
	Logger     *slog.Logger
}

// Defaults of Config.
const (
	// DefaultMaxRequestBytes is the default request size limit: an 8 MiB image or tensor.
	DefaultMaxRequestBytes = 8 << 20
	DefaultIntakeWorkers   = 32
	DefaultIntakeQueue     = 1024
	DefaultMaxTimeout      = time.Minute
	// maxMaxTimeout keeps every deadline far inside what Sleipnir-Deadline can carry (Unix nanoseconds, until 2262).
	maxMaxTimeout = 24 * time.Hour
)

// publishStallWait is how long a publish waits when too many acknowledgements are outstanding.
const publishStallWait = 200 * time.Millisecond

// shutdownGrace bounds each step of a shutdown: draining the request subscription, publishing what the intake holds.
// A variable for tests.
var shutdownGrace = 5 * time.Second

func (c *Config) setDefaults() {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", strings.Map(nameRune, host), os.Getpid())
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.DemandEvery == 0 {
		c.DemandEvery = time.Second
	}
	if c.IntakeWorkers <= 0 {
		c.IntakeWorkers = DefaultIntakeWorkers
	}
	if c.IntakeQueue <= 0 {
		c.IntakeQueue = DefaultIntakeQueue
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("frontend", c.ID)
}

func nameRune(r rune) rune {
	if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
		return r
	}
	return '-'
}

// Stats counts what a frontend did since it started.
type Stats struct {
	Accepted uint64 `json:"accepted"`
	Refused  uint64 `json:"refused"` // error replies to requests that were never sent into the pipeline
	// Overloaded counts the refusals (in Refused) of requests the intake had no room for, or that waited in it past
	// their deadline.
	Overloaded  uint64 `json:"overloaded"`
	Replied     uint64 `json:"replied"`
	Late        uint64 `json:"late"`
	StrayLeaves uint64 `json:"stray_leaves"` // leaf reports for requests already answered (at their deadline)
	BadReports  uint64 `json:"bad_reports"`  // undecodable or inconsistent result messages
	// ReplyFailures counts replies that could not be encoded or sent.
	ReplyFailures uint64 `json:"reply_failures"`
	// DemandWithheld counts demand reports not sent because their interval spanned a lost connection.
	DemandWithheld uint64 `json:"demand_withheld"`
}

// Frontend serves requests for every pipeline whose spec and plan are in the KV bucket.
type Frontend struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	tracer trace.Tracer
	result string // this frontend's result subject
	boot   string // random per start, in every request id
	seq    atomic.Uint64
	intake *intake
	// stopping is cancelled when Run gives up on the publishes still in flight at shutdown.
	stopping    context.Context
	stopPublish context.CancelFunc
	// complaints rate-limits the log lines of bad input and failed replies; Stats counts every one.
	complaints *ratelog.Limiter

	catalog *catalog.Catalog
	ready   chan struct{} // closed when the KV's initial specs and plans are loaded

	mu      sync.Mutex
	pending map[string]*request
	rng     *rand.Rand     // routing, under mu
	demand  map[string]int // requests accepted per pipeline since the last report, under mu

	accepted, refused, overloaded, replied, late, stray, badReports, replyFailures, demandWithheld atomic.Uint64
}

// New prepares a frontend on a connection; Run serves.
func New(nc *nats.Conn, cfg Config) (*Frontend, error) {
	cfg.setDefaults()
	if !wire.ValidName(cfg.ID) {
		return nil, fmt.Errorf("frontend id %q: use letters, digits, '_' and '-' only", cfg.ID)
	}
	if cfg.MaxTimeout < 0 || cfg.MaxTimeout > maxMaxTimeout {
		return nil, fmt.Errorf("frontend max timeout %v: want at most %v", cfg.MaxTimeout, maxMaxTimeout)
	}
	// Acknowledgements outstanding are bounded by the requests the intake holds, plus those whose deadline passed
	// first (abandoned until JetStream answers, or the timeout).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.IntakeWorkers+cfg.IntakeQueue),
		jetstream.WithPublishAsyncTimeout(max(cfg.MaxTimeout, DefaultMaxTimeout)))
	if err != nil {
		return nil, err
	}
	stopping, stopPublish := context.WithCancel(context.Background())
	return &Frontend{
		stopping: stopping, stopPublish: stopPublish,
		cfg: cfg, nc: nc, js: js, log: cfg.Logger, tracer: otel.Tracer("sleipnir/frontend"),
		result: wire.ResultSubject(cfg.ID), boot: fmt.Sprintf("%012x", rand.Uint64()>>16),
		intake:     newIntake(cfg.IntakeQueue),
		complaints: ratelog.New(cfg.Logger, 0, 0),
		ready:      make(chan struct{}), pending: map[string]*request{}, demand: map[string]int{},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0xf00d)),
	}, nil
}

// Stats returns the frontend's counters.
func (f *Frontend) Stats() Stats {
	return Stats{Accepted: f.accepted.Load(), Refused: f.refused.Load(), Overloaded: f.overloaded.Load(),
		Replied: f.replied.Load(), Late: f.late.Load(), StrayLeaves: f.stray.Load(), BadReports: f.badReports.Load(),
		ReplyFailures: f.replyFailures.Load(), DemandWithheld: f.demandWithheld.Load()}
}

// Ready is closed once the frontend has loaded the pipelines and plans in the KV bucket and takes requests.
func (f *Frontend) Ready() <-chan struct{} { return f.ready }

// Run serves until ctx is done; requests still pending then get an error reply.
func (f *Frontend) Run(ctx context.Context) error {
	// The planner owns the bucket: wait for it rather than create it.
	kv, err := bus.BindBucket(ctx, f.js)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("frontend: bind KV bucket: %w", err)
	}
	f.catalog = catalog.Watch(ctx, f.nc, kv, f.log, nil)
	// Take requests only once the pipelines are known, or early ones would be refused as unknown.
	select {
	case <-f.catalog.Ready():
	case <-ctx.Done():
		return nil
	}
	f.intake.start(f.cfg.IntakeWorkers)
	intakeClosed := false
	defer func() {
		if !intakeClosed {
			f.stopPublish()
			f.intake.close()
		}
	}()

	results, err := f.nc.Subscribe(f.result, f.onResult)
	if err != nil {
		return err
	}
	// Results are the frontend's own bookkeeping: never let a burst of them be dropped as a slow consumer.
	_ = results.SetPendingLimits(-1, -1)
	defer results.Unsubscribe()
	// The callback only stamps the arrival and hands the request to the bounded intake, so it never falls behind:
	// no pending limit is needed.
	requests, err := f.nc.QueueSubscribe(wire.InferPrefix+"*", wire.QueueFrontend, f.onRequest)
	if err != nil {
		return err
	}
	_ = requests.SetPendingLimits(-1, -1)
	defer requests.Unsubscribe()
	if err := f.nc.Flush(); err != nil {
		return fmt.Errorf("frontend: subscribe: %w", err)
	}
	close(f.ready)

	var httpErr chan error
	if f.cfg.HTTPAddr != "" {
		httpErr = make(chan error, 1)
		srv := f.httpServer()
		go func() { httpErr <- srv.ListenAndServe() }()
		defer srv.Shutdown(context.Background())
		f.log.Info("HTTP API listening", "addr", f.cfg.HTTPAddr)
	}
	go f.reportDemand(ctx)
	f.log.Info("frontend serving", "subject", wire.InferPrefix+"*", "results", f.result, "boot", f.boot)
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("HTTP API on %s: %w", f.cfg.HTTPAddr, err)
		}
	}
	// Stop taking requests, submit those already taken in, then fail what is still pending: each gets its reply.
	if err := requests.Drain(); err == nil {
		for end := time.Now().Add(shutdownGrace); requests.IsValid() && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Publish what the intake holds, but give up on a stalled JetStream after a grace period: those get an error.
	giveUp := time.AfterFunc(shutdownGrace, f.stopPublish)
	f.intake.close()
	intakeClosed = true
	giveUp.Stop()
	f.failAll("the frontend is shutting down")
	return runErr
}

// Pipelines lists the pipelines this frontend can serve now.
func (f *Frontend) Pipelines() []string { return f.catalog.Pipelines() }

func (f *Frontend) lookup(name string) (*pipeline.Spec, *plan.Plan) { return f.catalog.Lookup(name) }

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
}

// submission is a decoded client request, whatever API it came through.
type submission struct {
	pipeline string
	req      wire.InferRequest
	arrival  time.Time // when the frontend received it: its deadline runs from here
	deadline time.Time
	trace    propagation.TextMapCarrier
	reply    func(*wire.InferReply)
}

// Error kinds of refused requests; the HTTP API maps them to status codes.
var (
	ErrBadRequest      = errors.New("bad request")
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
// is pure (no NATS, no clock): NATS and HTTP requests go through it, and FuzzDecodeRequest drives it.
// badJSON opens the error for a payload that is not JSON (the two APIs word it differently).
func decodeRequest(data []byte, asJSON bool, header func(string) string, arrival time.Time, spec *pipeline.Spec,
	maxBytes int, maxAhead time.Duration, badJSON string) (wire.InferRequest, time.Time, error) {
	var req wire.InferRequest
	if len(data) > maxBytes {
		return req, time.Time{}, refuse(ErrBadRequest, "request of %d bytes exceeds the limit of %d", len(data), maxBytes)
	}
	if asJSON {
		if err := json.Unmarshal(data, &req); err != nil {
			return req, time.Time{}, refuse(ErrBadRequest, "%s: %v", badJSON, err)
		}
	} else if err := wire.UnmarshalMsgpack(data, &req); err != nil {
		return req, time.Time{}, refuse(ErrBadRequest, "request is not a msgpack InferRequest (or set %s: %s): %v",
			wire.HeaderContentType, wire.ContentJSON, err)
	}
	if len(req.Inputs) == 0 {
		return req, time.Time{}, refuse(ErrBadRequest, "request has no inputs")
	}
	for i := range req.Inputs {
		if err := req.Inputs[i].Validate(); err != nil {
			return req, time.Time{}, refuse(ErrBadRequest, "inputs[%d]: %v", i, err)
		}
	}
	d, err := deadlineOf(arrival, header, spec, maxAhead)
	return req, d, err
}

// submit sends an accepted request into the pipeline, in its turn, or returns why it was refused. On success,
// sub.reply is called exactly once, later. The publish is bounded by the request's deadline.
func (f *Frontend) submit(ctx context.Context, sub *submission, t *turn) error {
	spec, p := f.lookup(sub.pipeline)
	if spec == nil {
		return refuse(ErrUnknownPipeline, "unknown pipeline %q (serving: %s)", sub.pipeline, strings.Join(f.Pipelines(), ", "))
	}
	if p == nil {
		return refuse(ErrUnavailable, "pipeline %q has no plan yet", sub.pipeline)
	}
	now := time.Now()
	if !sub.deadline.After(now) {
		return refuse(ErrOverloaded, "overloaded: the request waited %v in the frontend, past its deadline; retry later",
			now.Sub(sub.arrival).Round(time.Millisecond))
	}
	root := spec.Root().Name
	f.mu.Lock()
	variant := plan.Pick(p.Routing.Root, f.rng.Float64())
	f.mu.Unlock()
	if variant == "" {
		return refuse(ErrUnavailable, "pipeline %q: the plan hosts no variant of task %s", sub.pipeline, root)
	}
	r := &request{
		id: wire.RequestID(f.cfg.ID, f.boot, f.seq.Add(1)), clientID: sub.req.ID, pipeline: sub.pipeline,
		start: sub.arrival, deadline: sub.deadline, tracker: completion.New(), reply: sub.reply,
	}
	var spanCtx context.Context
	spanCtx, r.span = f.tracer.Start(otel.GetTextMapPropagator().Extract(ctx, sub.trace), "infer "+sub.pipeline,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(sub.arrival),
		trace.WithAttributes(attribute.String("sleipnir.request_id", r.id)))

	data, err := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1, Inputs: sub.req.Inputs}}})
	if err != nil {
		r.span.End()
		return refuse(ErrBadRequest, "encode request: %v", err)
	}
	msg := nats.NewMsg(wire.TaskSubject(sub.pipeline, root, variant))
	msg.Data = data
	wire.TaskHeaders{RequestID: r.id, Deadline: r.deadline, ReplyTo: f.result,
		MsgID: wire.TaskMsgID(r.id, "", root, variant)}.Write(msg.Header.Set)
	otel.GetTextMapPropagator().Inject(spanCtx, bus.HeaderCarrier(msg.Header))

	// Register before publishing: a fast worker may report before the publish returns. From here the deadline timer
	// guarantees the reply, whatever becomes of the task message.
	f.mu.Lock()
	f.demand[sub.pipeline]++
	f.pending[r.id] = r
	r.timer = time.AfterFunc(time.Until(r.deadline), func() { f.expire(r.id) })
	f.mu.Unlock()
	pubCtx, cancel := context.WithDeadline(ctx, r.deadline)
	defer cancel()
	defer context.AfterFunc(f.stopping, cancel)()
	ack, err := f.publish(pubCtx, msg, t)
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
		f.mu.Unlock()
		r.timer.Stop()
		r.span.End()
		if !still {
			return nil // already answered (the deadline passed during the publish)
		}
		return err
	}
	f.accepted.Add(1)
	return nil
}

// publish sends msg in its turn and waits for JetStream's acknowledgement until ctx ends.
func (f *Frontend) publish(ctx context.Context, msg *nats.Msg, t *turn) (*jetstream.PubAck, error) {
	if !t.take(ctx) {
		return nil, ctx.Err()
	}
	// No retry when no stream answers (nats.go waits 250 ms twice by default): the client, told at once, can retry
	// as well as the frontend could. Stalled (too many acknowledgements outstanding), give up soon: the turn is held.
	fut, err := f.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(0), jetstream.WithStallWait(publishStallWait))
	t.pass()
	if err != nil {
		return nil, err
	}
	select {
	case ack := <-fut.Ok():
		return ack, nil
	case err := <-fut.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// reportDemand tells the planner, every DemandEvery, how many requests each pipeline received (zero included, so
// the estimate falls when traffic stops).
func (f *Frontend) reportDemand(ctx context.Context) {
	t := time.NewTicker(f.cfg.DemandEvery)
	defer t.Stop()
	last := time.Now()
	reconnects := f.nc.Stats().Reconnects
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f.mu.Lock()
			counts := f.demand
			f.demand = make(map[string]int, len(counts))
			f.mu.Unlock()
			interval := now.Sub(last)
			last = now
			// What a frontend counts while its clients cannot reach it (the connection lost, or the server
			// restarting) is not the demand: a report of it, flushed on reconnect, made the planner shrink the plan
			// for a second after every server restart. Withheld, the planner holds its estimate meanwhile.
			if r := f.nc.Stats().Reconnects; r != reconnects || !f.nc.IsConnected() {
				reconnects = r
				f.demandWithheld.Add(1)
				continue
			}
			for _, name := range f.Pipelines() {
				data, _ := msgpack.Marshal(&wire.DemandReport{Frontend: f.cfg.ID, Count: counts[name],
					IntervalMs: float64(interval) / float64(time.Millisecond)})
				if err := f.nc.Publish(wire.DemandSubject(name), data); err != nil {
					f.log.Debug("demand report failed", "err", err)
				}
			}
		}
	}
}

// onResult records leaf reports and replies to requests they complete.
func (f *Frontend) onResult(m *nats.Msg) {
	var rm wire.ResultMessage
	if err := wire.UnmarshalMsgpack(m.Data, &rm); err != nil {
		f.badReports.Add(1)
		f.complaints.Warn("discarding undecodable result message", "err", err)
		return
	}
	f.mu.Lock()
	r, ok := f.pending[rm.RequestID]
	if !ok {
		f.mu.Unlock()
		f.stray.Add(uint64(len(rm.Items)))
		return
	}
	done := false
	for _, it := range rm.Items {
		d, _, err := r.tracker.Add(it)
		if err != nil {
			f.badReports.Add(1)
			f.complaints.Warn("inconsistent leaf report", "request", rm.RequestID, "err", err)
		}
		done = done || d
	}
	if done {
		delete(f.pending, r.id)
		r.timer.Stop()
	}
	f.mu.Unlock()
	if done {
		f.finish(r, false, "")
	}
}

// expire answers a request at its deadline with what has finished.
func (f *Frontend) expire(id string) {
	f.mu.Lock()
	r, ok := f.pending[id]
	delete(f.pending, id)
	f.mu.Unlock()
	if ok {
		f.late.Add(1)
		f.finish(r, true, "")
	}
}

// failAll answers every pending request with an error (at shutdown).
func (f *Frontend) failAll(why string) {
	f.mu.Lock()
	all := f.pending
	f.pending = map[string]*request{}
	f.mu.Unlock()
	for _, r := range all {
		r.timer.Stop()
		f.finish(r, false, why)
	}
}

// finish sends the one reply of a request that has left the pending map.
func (f *Frontend) finish(r *request, late bool, failure string) {
	rep := &wire.InferReply{ID: r.clientID, RequestID: r.id, Pipeline: r.pipeline,
		Status: r.tracker.Status(late), Results: r.tracker.Results(),
		LatencyMs: float64(time.Since(r.start).Microseconds()) / 1000}
	if failure != "" {
		rep.Status, rep.Error = wire.StatusError, failure
	}
	if rep.Results == nil {
		rep.Results = []wire.ItemResult{}
	}
	if spec, _ := f.lookup(r.pipeline); spec != nil {
		rep.Accuracy = servedAccuracy(spec, rep.Results)
	}
	r.span.SetAttributes(attribute.String("sleipnir.status", rep.Status))
	if rep.Status != wire.StatusOK {
		r.span.SetStatus(codes.Error, rep.Status)
	}
	r.span.End()
	f.replied.Add(1)
	r.reply(rep)
}

// servedAccuracy is the weighted mean of the path accuracies of the finished leaves.
func servedAccuracy(spec *pipeline.Spec, results []wire.ItemResult) float64 {
	var acc completion.Accuracy
	for _, it := range results {
		if it.Status == wire.ItemOK && it.Den != 0 {
			acc.Add(1/float64(it.Den), spec.PathAccuracyOf(it.Path))
		}
	}
	return acc.Value()
}
