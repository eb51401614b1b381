// Package frontend is the frontend service: it accepts requests on NATS (request-reply on wire.InferPrefix+pipeline)
// and HTTP (KServe v2), sends each to the root task's variant the routing table picks, collects the leaves the
// workers report, and replies exactly once: when every leaf is in, or at the deadline, whichever comes first.
package frontend

import (
	"context"
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
	Logger      *slog.Logger
}

// DefaultMaxRequestBytes is the default request size limit: an 8 MiB image or tensor.
const DefaultMaxRequestBytes = 8 << 20

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
	Accepted    uint64 `json:"accepted"`
	Refused     uint64 `json:"refused"` // error replies to requests that were never sent into the pipeline
	Replied     uint64 `json:"replied"`
	Late        uint64 `json:"late"`
	StrayLeaves uint64 `json:"stray_leaves"` // leaf reports for requests already answered (at their deadline)
	BadReports  uint64 `json:"bad_reports"`  // undecodable or inconsistent result messages
}

// Frontend serves requests for every pipeline whose spec and plan are in the KV bucket.
type Frontend struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	tracer trace.Tracer
	result string // this frontend's result subject
	seq    atomic.Uint64

	catalog *catalog.Catalog
	ready   chan struct{} // closed when the KV's initial specs and plans are loaded

	mu      sync.Mutex
	pending map[string]*request
	rng     *rand.Rand     // routing, under mu
	demand  map[string]int // requests accepted per pipeline since the last report, under mu

	accepted, refused, replied, late, stray, badReports atomic.Uint64
}

// New prepares a frontend on a connection; Run serves.
func New(nc *nats.Conn, cfg Config) (*Frontend, error) {
	cfg.setDefaults()
	if !wire.ValidName(cfg.ID) {
		return nil, fmt.Errorf("frontend id %q: use letters, digits, '_' and '-' only", cfg.ID)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Frontend{
		cfg: cfg, nc: nc, js: js, log: cfg.Logger, tracer: otel.Tracer("sleipnir/frontend"),
		result: wire.ResultSubject(cfg.ID), ready: make(chan struct{}), pending: map[string]*request{}, demand: map[string]int{},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0xf00d)),
	}, nil
}

// Stats returns the frontend's counters.
func (f *Frontend) Stats() Stats {
	return Stats{Accepted: f.accepted.Load(), Refused: f.refused.Load(), Replied: f.replied.Load(),
		Late: f.late.Load(), StrayLeaves: f.stray.Load(), BadReports: f.badReports.Load()}
}

// Ready is closed once the frontend has loaded the pipelines and plans in the KV bucket.
func (f *Frontend) Ready() <-chan struct{} { return f.ready }

// Run serves until ctx is done; requests still pending then get an error reply.
func (f *Frontend) Run(ctx context.Context) error {
	kv, err := bus.OpenBucket(ctx, f.js, jetstream.FileStorage)
	if err != nil {
		return fmt.Errorf("frontend: open KV bucket: %w", err)
	}
	f.catalog = catalog.Watch(ctx, f.nc, kv, f.log, nil)
	// Take requests only once the pipelines are known, or early ones would be refused as unknown.
	select {
	case <-f.catalog.Ready():
		close(f.ready)
	case <-ctx.Done():
		return nil
	}

	results, err := f.nc.Subscribe(f.result, f.onResult)
	if err != nil {
		return err
	}
	// Results are the frontend's own bookkeeping: never let a burst of them be dropped as a slow consumer.
	_ = results.SetPendingLimits(-1, -1)
	defer results.Unsubscribe()
	requests, err := f.nc.QueueSubscribe(wire.InferPrefix+"*", wire.QueueFrontend, f.onRequest)
	if err != nil {
		return err
	}
	_ = requests.SetPendingLimits(-1, -1)
	defer requests.Unsubscribe()

	var httpErr chan error
	if f.cfg.HTTPAddr != "" {
		httpErr = make(chan error, 1)
		srv := f.httpServer()
		go func() { httpErr <- srv.ListenAndServe() }()
		defer srv.Shutdown(context.Background())
		f.log.Info("HTTP API listening", "addr", f.cfg.HTTPAddr)
	}
	go f.reportDemand(ctx)
	f.log.Info("frontend serving", "subject", wire.InferPrefix+"*", "results", f.result)
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.failAll("the frontend is stopping")
			return fmt.Errorf("HTTP API on %s: %w", f.cfg.HTTPAddr, err)
		}
	}
	// Stop taking requests, answer those already taken in, then fail what is still pending: each gets its reply.
	if err := requests.Drain(); err == nil {
		for end := time.Now().Add(5 * time.Second); requests.IsValid() && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	f.failAll("the frontend is shutting down")
	return nil
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
	deadline time.Time
	trace    propagation.TextMapCarrier
	reply    func(*wire.InferReply)
}

// Error kinds of refused requests; the HTTP API maps them to status codes.
var (
	ErrBadRequest      = errors.New("bad request")
	ErrUnknownPipeline = errors.New("unknown pipeline")
	ErrUnavailable     = errors.New("unavailable")
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

// deadlineOf reads the request's deadline from its headers: absolute (wire.HeaderDeadline), relative
// (wire.HeaderTimeout), or the pipeline's SLO from now.
func deadlineOf(now time.Time, get func(string) string, spec *pipeline.Spec) (time.Time, error) {
	if s := get(wire.HeaderDeadline); s != "" {
		d, err := wire.ParseDeadline(s)
		if err != nil {
			return time.Time{}, refuse(ErrBadRequest, "%v", err)
		}
		if !d.After(now) {
			return time.Time{}, refuse(ErrBadRequest, "deadline %s has already passed", d.UTC().Format(time.RFC3339Nano))
		}
		return d, nil
	}
	if s := get(wire.HeaderTimeout); s != "" {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return time.Time{}, refuse(ErrBadRequest, "%s %q: want a duration such as 250ms", wire.HeaderTimeout, s)
		}
		if d <= 0 {
			return time.Time{}, refuse(ErrBadRequest, "%s %s: the deadline has already passed", wire.HeaderTimeout, s)
		}
		return now.Add(d), nil
	}
	return now.Add(time.Duration(spec.SLOMs * float64(time.Millisecond))), nil
}

// submit sends an accepted request into the pipeline, or returns why it was refused. On success, sub.reply is
// called exactly once, later.
func (f *Frontend) submit(ctx context.Context, sub *submission) error {
	spec, p := f.lookup(sub.pipeline)
	if spec == nil {
		return refuse(ErrUnknownPipeline, "unknown pipeline %q (serving: %s)", sub.pipeline, strings.Join(f.Pipelines(), ", "))
	}
	if p == nil {
		return refuse(ErrUnavailable, "pipeline %q has no plan yet", sub.pipeline)
	}
	if len(sub.req.Inputs) == 0 {
		return refuse(ErrBadRequest, "request has no inputs")
	}
	for i := range sub.req.Inputs {
		if err := sub.req.Inputs[i].Validate(); err != nil {
			return refuse(ErrBadRequest, "inputs[%d]: %v", i, err)
		}
	}
	root := spec.Root().Name
	f.mu.Lock()
	variant := plan.Pick(p.Routing.Root, f.rng.Float64())
	f.mu.Unlock()
	if variant == "" {
		return refuse(ErrUnavailable, "pipeline %q: the plan hosts no variant of task %s", sub.pipeline, root)
	}
	now := time.Now()
	r := &request{
		id: fmt.Sprintf("%s-%d", f.cfg.ID, f.seq.Add(1)), clientID: sub.req.ID, pipeline: sub.pipeline,
		start: now, deadline: sub.deadline, tracker: completion.New(), reply: sub.reply,
	}
	var spanCtx context.Context
	spanCtx, r.span = f.tracer.Start(otel.GetTextMapPropagator().Extract(ctx, sub.trace), "infer "+sub.pipeline,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("sleipnir.request_id", r.id)))

	data, err := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1, Inputs: sub.req.Inputs}}})
	if err != nil {
		r.span.End()
		return refuse(ErrBadRequest, "encode request: %v", err)
	}
	msg := nats.NewMsg(wire.TaskSubject(sub.pipeline, root, variant))
	msg.Data = data
	msg.Header.Set(wire.HeaderRequestID, r.id)
	msg.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(r.deadline))
	msg.Header.Set(wire.HeaderReplyTo, f.result)
	msg.Header.Set(wire.HeaderMsgID, wire.TaskMsgID(r.id, "", root, variant))
	otel.GetTextMapPropagator().Inject(spanCtx, bus.HeaderCarrier(msg.Header))

	// Register before publishing: a fast worker may report before the publish returns.
	f.mu.Lock()
	f.demand[sub.pipeline]++
	f.pending[r.id] = r
	r.timer = time.AfterFunc(time.Until(r.deadline), func() { f.expire(r.id) })
	f.mu.Unlock()
	if _, err := f.js.PublishMsg(ctx, msg); err != nil {
		f.mu.Lock()
		_, still := f.pending[r.id]
		delete(f.pending, r.id)
		f.mu.Unlock()
		r.timer.Stop()
		r.span.End()
		if !still {
			return nil // already answered (the deadline passed during the publish)
		}
		return refuse(ErrUnavailable, "cannot enqueue request on %s: %v", msg.Subject, err)
	}
	f.accepted.Add(1)
	return nil
}

// reportDemand tells the planner, every DemandEvery, how many requests each pipeline received (zero included, so
// the estimate falls when traffic stops).
func (f *Frontend) reportDemand(ctx context.Context) {
	t := time.NewTicker(f.cfg.DemandEvery)
	defer t.Stop()
	last := time.Now()
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
		f.log.Warn("discarding undecodable result message", "err", err)
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
			f.log.Warn("inconsistent leaf report", "request", rm.RequestID, "err", err)
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
