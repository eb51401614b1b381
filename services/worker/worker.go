// Package worker is the worker service: it registers itself, waits for an assignment in the KV bucket, and serves
// the assigned variant's subject in batches, forwarding sub-requests to the child tasks' variants and reporting
// finished, dropped and failed leaves to the frontend that owns each request.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/catalog"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	_ "github.com/sleipnir-serving/sleipnir/pkg/executor/all" // the worker runs variants of every kind
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config is the worker's configuration.
type Config struct {
	// ID names the worker in KV keys; default: hostname-pid.
	ID string
	// Class is the worker's server class (default wire.DefaultClass), in its heartbeat: the planner assigns it only
	// variants hosted on its class ("model@class"; docs/classes.md).
	Class string
	// Seed makes emulated latencies and fan-out reproducible; 0 derives one from the ID.
	Seed uint64
	// AckWait is how often (a third of it) a batch running long is marked in progress when the consumer's own ack
	// wait, which the planner sets, is unknown.
	AckWait time.Duration
	// PublishAckTimeout bounds the wait for the stream's acknowledgement of a sub-request's publish (default
	// DefaultPublishAckTimeout). A leader killed after it took a publish and before it answered (on another node
	// than the worker's, whose connection stays up) never answers: without a bound, the message that published it
	// stayed in progress, its batch unsettled, for ever.
	PublishAckTimeout time.Duration
	// FetchWait bounds one wait for work: how long an assignment change waits for an idle worker (several-pipelines.md).
	FetchWait time.Duration
	// RegisterEvery is the period of the worker's registration refresh, by which the planner knows it is alive.
	RegisterEvery time.Duration
	// ModelsDir is where the model files of onnx variants are (default $SLEIPNIR_MODELS, else models).
	ModelsDir string
	// NewExecutor builds the executor of an assigned variant; default executor.New.
	NewExecutor func(spec *pipeline.Spec, task, variant string, opts executor.Options) (executor.Executor, error)
	// Metrics, if set, records batches and queue waits and exports the worker's counters (pkg/metrics; shared by
	// the workers of a process).
	Metrics *metrics.Worker
	Logger  *slog.Logger
}

// DefaultPublishAckTimeout is Config.PublishAckTimeout's default: far longer than an acknowledgement takes on a
// loaded server, and past every deadline of a request of a second's SLO, so that giving up re-sends only what a
// lost leader left unanswered (the re-sent sub-requests are de-duplicated by their message ids).
const DefaultPublishAckTimeout = 5 * time.Second

// DefaultID is a worker's id when none is given: <hostname>-<pid>.
func DefaultID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", sanitize(host), os.Getpid())
}

func (c *Config) setDefaults() {
	if c.ID == "" {
		c.ID = DefaultID()
	}
	if c.Seed == 0 {
		c.Seed = seedOf(c.ID)
	}
	if c.Class == "" {
		c.Class = wire.DefaultClass
	}
	if c.AckWait == 0 {
		c.AckWait = bus.DefaultAckWait
	}
	if c.PublishAckTimeout == 0 {
		c.PublishAckTimeout = DefaultPublishAckTimeout
	}
	if c.FetchWait == 0 {
		c.FetchWait = 100 * time.Millisecond
	}
	if c.RegisterEvery == 0 {
		c.RegisterEvery = time.Second
	}
	if c.NewExecutor == nil {
		c.NewExecutor = executor.New
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("worker", c.ID)
}

// Registration, Stats and Observed are the worker's heartbeat, written down in pkg/wire.
type (
	Registration = wire.Registration
	Stats        = wire.WorkerStats
	Observed     = wire.Observed
)

// Worker serves one variant at a time.
type Worker struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	log    *slog.Logger
	tracer trace.Tracer

	mu sync.Mutex
	// assigned is the newest assignment read from the bucket; following, the last one that passed validation
	// against its pipeline's spec and plan (what the worker serves). An assignment that does not pass is not
	// followed: the worker keeps serving what it was (the planner puts its own value back).
	assigned, following plan.Assignment
	// checked is the last assignment want validated, with the spec and plan it was checked against, and the
	// verdict: Run's goroutine only.
	checked checkedAssignment
	// complaints rate-limits the log lines of bad input (assignments, task messages); every one is counted.
	complaints *ratelog.Limiter
	changed    chan struct{} // signalled when the assignment, a spec or a plan changes
	// fault is the assignment the worker could not start, under mu (retry.go); beat asks for a heartbeat now.
	fault *wire.AssignmentFailure
	beat  chan struct{}

	messages, items, batches, dropped, failed, discarded, rerouted atomic.Uint64
	returned                                                       atomic.Uint64             // messages that did not fit a batch: handed back, or carried
	unconfirmed, abandoned                                         atomic.Uint64             // result reports (report)
	drops                                                          map[string]*atomic.Uint64 // by reason; the map is fixed at New
	setAsideCounts                                                 map[string]*atomic.Uint64 // messages set aside, by reason; fixed at New
	swapMs                                                         atomic.Uint64             // float64 bits
	serving                                                        atomic.Pointer[string]
	rng                                                            *rand.Rand // routing; used only by the serving goroutine

	obsMu    sync.Mutex
	observed map[string]*Observed // by "pipeline:task/variant"
	latency  *latency.Window      // the recent batch latencies, by the same key; under obsMu

	degraded atomic.Uint64 // items answered degraded (policy degrade, countDegraded)
	queues   *queueWatch   // the queues' state, for queue-aware routing (queues.go)
	// policiesFor is the last plan whose routing_mode ramsis policies are computed: the serving routes by them
	// from its next message on (policies.go).
	policiesFor atomic.Pointer[plan.Plan]
}

// Serving is what the worker serves now, "pipeline:task/variant", or "" when idle.
func (w *Worker) Serving() string {
	if s := w.serving.Load(); s != nil {
		return *s
	}
	return ""
}

// New prepares a worker on a connection; Run serves.
func New(nc *nats.Conn, cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if !wire.ValidName(cfg.ID) {
		return nil, fmt.Errorf("worker id %q: use letters, digits, '_' and '-' only", cfg.ID)
	}
	if !wire.ValidName(cfg.Class) {
		return nil, fmt.Errorf("worker class %q: use letters, digits, '_' and '-' only", cfg.Class)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishAckTimeout))
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg: cfg, nc: nc, js: js, log: cfg.Logger, queues: newQueueWatch(), tracer: otel.Tracer("sleipnir/worker"),
		changed: make(chan struct{}, 1), beat: make(chan struct{}, 1), drops: map[string]*atomic.Uint64{}, observed: map[string]*Observed{},
		latency:    latency.NewWindow(),
		complaints: ratelog.New(cfg.Logger, 0, 0),
		assigned:   plan.Assignment{Worker: cfg.ID}, following: plan.Assignment{Worker: cfg.ID},
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x707e)),
	}
	for _, r := range wire.DropReasons {
		w.drops[r] = new(atomic.Uint64)
	}
	w.setAsideCounts = map[string]*atomic.Uint64{}
	for _, r := range wire.SetAsideReasons {
		w.setAsideCounts[r] = new(atomic.Uint64)
	}
	cfg.Metrics.AddSource(w)
	return w, nil
}

// ID is the worker's name.
func (w *Worker) ID() string { return w.cfg.ID }

// Class is the worker's server class.
func (w *Worker) Class() string { return w.cfg.Class }

// Run serves until ctx is done. A batch in hand then is handed back (negatively acknowledged) so that another replica
// takes it at once; a batch in hand when the assignment changes is finished first. The messages carried for the
// next batch are handed back in both cases.
func (w *Worker) Run(ctx context.Context) error {
	// The planner owns the bucket: wait for it rather than create it.
	kv, err := bus.BindBucket(ctx, w.js)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("worker %s: bind KV bucket: %w", w.cfg.ID, err)
	}
	w.kv = kv
	svc, err := w.addService()
	if err != nil {
		return fmt.Errorf("worker %s: micro service: %w", w.cfg.ID, err)
	}
	defer svc.Stop()
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	go bus.WatchKV(watchCtx, w.nc, kv, wire.AssignKey(w.cfg.ID), w.onAssignment, nil)
	// A new plan changes routing, picked up with the next batch; a worker waiting for its first plan wakes up.
	cat := catalog.Watch(watchCtx, w.nc, kv, w.log, w.signal)
	go w.register(watchCtx)
	go w.watchQueues(watchCtx)

	var cur *serving
	defer func() {
		if cur != nil {
			cur.stop()
		}
		// Deregister so the planner gives the replica to another worker at once.
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = kv.Delete(dctx, wire.WorkerKey(w.cfg.ID))
	}()
	for ctx.Err() == nil {
		if w.nc.IsClosed() {
			return errors.New("worker " + w.cfg.ID + ": NATS connection closed")
		}
		next := w.want(cat)
		if cur == nil || !cur.same(next) {
			// The swap time runs from releasing the old variant to serving the new one.
			swapStart := time.Now()
			if cur != nil {
				cur.stop()
				cur = nil
				w.serving.Store(nil)
			}
			// Without its pipeline's spec and plan a worker cannot execute or route: it waits for both.
			if next.a.Idle() || next.spec == nil || next.plan == nil {
				w.setFault(nil)
				w.wait(ctx)
				continue
			}
			s, err := w.start(ctx, next, swapStart)
			if err != nil {
				w.retryAfter(ctx, cat, next, w.cannotServe(next.a, err))
				continue
			}
			w.setFault(nil)
			cur = s
			name := next.a.Served().String()
			w.serving.Store(&name)
		}
		cur.follow(next, w.log)
		cur.refreshStage() // before the first message too: queue-aware routing reads the queues from now on
		w.serveOnce(ctx, cur)
	}
	return nil
}

// wanted is what the worker should serve now, as the KV bucket says.
type wanted struct {
	a    plan.Assignment
	spec *pipeline.Spec
	plan *plan.Plan
}

// The pkg/ratelog keys of what the worker refused or survived.
const (
	ComplainAssignment = "assignment in KV refused; serving the last good one"
	ComplainItem       = "item with invalid tensors failed"
	ComplainPanic      = "executor panicked; its batch failed"
)

// Complaints counts what the worker refused, by kind.
func (w *Worker) Complaints() map[string]uint64 { return w.complaints.Counts() }

// want is what the worker follows: the newest assignment when it passes validation against its pipeline's spec and
// plan (plan.Assignment.Validate), else the last one that did. An assignment of another epoch than the plan's may
// be ahead of its plan (watched apart), so it is only refused aloud when the epochs agree.
func (w *Worker) want(cat *catalog.Catalog) wanted {
	w.mu.Lock()
	a := w.assigned
	w.mu.Unlock()
	spec, p := cat.Lookup(a.Pipeline)
	err := w.checked.err
	if fresh := (checkedAssignment{a: a, spec: spec, plan: p}); w.checked.a != a || w.checked.spec != spec ||
		w.checked.plan != p {
		err = a.Validate(w.cfg.ID, spec, p)
		if err == nil && !a.Idle() && wire.ClassOf(a.Variant) != w.cfg.Class {
			err = fmt.Errorf("assignment of %s, a variant of class %s, to a worker of class %s", a.Key(),
				wire.ClassOf(a.Variant), w.cfg.Class)
		}
		fresh.err, fresh.at = err, time.Now()
		w.checked = fresh
		// A plan and its assignment arriving one before the other is no news (they are watched apart: at a clean
		// start the catalog may load an empty bucket and see the plan after the assignment), nor is an assignment
		// read before the catalog's first load: only an assignment that cannot be right is, or one still without
		// its spec and plan after noPlanGrace.
		if err != nil && !errors.Is(err, plan.ErrEpoch) && !errors.Is(err, plan.ErrNoPlan) {
			w.complaints.Error(ComplainAssignment, "err", err)
		}
	}
	if c := &w.checked; errors.Is(err, plan.ErrNoPlan) && !c.complained && loaded(cat) &&
		time.Since(c.at) > noPlanGrace {
		c.complained = true
		w.complaints.Error(ComplainAssignment, "err", err)
	}
	w.mu.Lock()
	if err == nil {
		w.following = a
	} else {
		a = w.following
	}
	w.mu.Unlock()
	if err != nil {
		spec, p = cat.Lookup(a.Pipeline)
	}
	return wanted{a: a, spec: spec, plan: p}
}

// loaded reports whether the catalog has read the bucket's specs and plans once.
func loaded(cat *catalog.Catalog) bool {
	select {
	case <-cat.Ready():
		return true
	default:
		return false
	}
}

type checkedAssignment struct {
	a    plan.Assignment
	spec *pipeline.Spec
	plan *plan.Plan
	err  error
	// at is when the verdict was reached; complained, whether an ErrNoPlan verdict was logged.
	at         time.Time
	complained bool
}

// noPlanGrace is how long an assignment may wait for its pipeline's spec and plan before the worker says so.
const noPlanGrace = 2 * time.Second

func (w *Worker) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-w.changed:
	}
}

func (w *Worker) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *Worker) onAssignment(e jetstream.KeyValueEntry) {
	a := plan.Assignment{Worker: w.cfg.ID} // deleted: idle
	if e.Operation() == jetstream.KeyValuePut {
		a = plan.Assignment{}
		if err := json.Unmarshal(e.Value(), &a); err != nil {
			w.complaints.Error(ComplainAssignment, "key", e.Key(), "err", err)
			return
		}
	}
	w.mu.Lock()
	w.assigned = a
	w.mu.Unlock()
	w.signal()
}

// sanitize makes a host name usable as a worker id.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	return string(b)
}

func seedOf(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}
