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
	"maps"
	"math"
	"math/rand/v2"
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
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/batching"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/catalog"
)

// Config is the worker's configuration.
type Config struct {
	// ID names the worker in KV keys; default: hostname-pid.
	ID string
	// Seed makes emulated latencies and fan-out reproducible; 0 derives one from the ID.
	Seed uint64
	// AckWait is how often (a third of it) a batch running long is marked in progress when the consumer's own ack
	// wait, which the planner sets, is unknown.
	AckWait time.Duration
	// FetchWait bounds one wait for work, and so how long an assignment change waits for an idle worker.
	FetchWait time.Duration
	// RegisterEvery is the period of the worker's registration refresh, by which the planner knows it is alive.
	RegisterEvery time.Duration
	// ModelsDir is where the model files of onnx variants are (default $SLEIPNIR_MODELS, else models).
	ModelsDir string
	// NewExecutor builds the executor of an assigned variant; default executor.New.
	NewExecutor func(spec *pipeline.Spec, task, variant string, opts executor.Options) (executor.Executor, error)
	Logger      *slog.Logger
}

func (c *Config) setDefaults() {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", sanitize(host), os.Getpid())
	}
	if c.Seed == 0 {
		c.Seed = seedOf(c.ID)
	}
	if c.AckWait == 0 {
		c.AckWait = bus.DefaultAckWait
	}
	if c.FetchWait == 0 {
		c.FetchWait = 500 * time.Millisecond
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

	messages, items, batches, dropped, failed, discarded, rerouted atomic.Uint64
	returned                                                       atomic.Uint64             // messages naked: they did not fit a batch
	drops                                                          map[string]*atomic.Uint64 // by reason; the map is fixed at New
	swapMs                                                         atomic.Uint64             // float64 bits
	serving                                                        atomic.Pointer[string]
	rng                                                            *rand.Rand // routing; used only by the serving goroutine

	obsMu    sync.Mutex
	observed map[string]*Observed // by "pipeline:task/variant"
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
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg: cfg, nc: nc, js: js, log: cfg.Logger, tracer: otel.Tracer("sleipnir/worker"),
		changed: make(chan struct{}, 1), drops: map[string]*atomic.Uint64{}, observed: map[string]*Observed{},
		complaints: ratelog.New(cfg.Logger, 0, 0),
		assigned:   plan.Assignment{Worker: cfg.ID}, following: plan.Assignment{Worker: cfg.ID},
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x707e)),
	}
	for _, r := range wire.DropReasons {
		w.drops[r] = new(atomic.Uint64)
	}
	return w, nil
}

// countDrop counts one item dropped at variant s for reason.
func (w *Worker) countDrop(s *serving, reason string) {
	w.dropped.Add(1)
	if c := w.drops[reason]; c != nil {
		c.Add(1)
	}
	w.observe(s, func(o *Observed) { o.Dropped[reason]++ })
}

// observe updates the measurements of the variant s serves.
func (w *Worker) observe(s *serving, f func(*Observed)) {
	key := s.a.Pipeline + ":" + s.hop
	w.obsMu.Lock()
	defer w.obsMu.Unlock()
	o := w.observed[key]
	if o == nil {
		o = &Observed{FanoutCounts: wire.FanoutCounts{Children: map[string]uint64{}}, Dropped: map[string]uint64{}}
		w.observed[key] = o
	}
	f(o)
}

// Observations returns a copy of the worker's cumulative measurements.
func (w *Worker) Observations() map[string]Observed {
	w.obsMu.Lock()
	defer w.obsMu.Unlock()
	out := make(map[string]Observed, len(w.observed))
	for k, o := range w.observed {
		c := *o
		c.Children = maps.Clone(o.Children)
		c.Dropped = maps.Clone(o.Dropped)
		out[k] = c
	}
	return out
}

// ID is the worker's name.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	st := Stats{Messages: w.messages.Load(), Items: w.items.Load(), Batches: w.batches.Load(),
		Dropped: w.dropped.Load(), Failed: w.failed.Load(), Discarded: w.discarded.Load(),
		Rerouted: w.rerouted.Load(), Returned: w.returned.Load(), DropReasons: map[string]uint64{}}
	for r, c := range w.drops {
		if n := c.Load(); n > 0 {
			st.DropReasons[r] = n
		}
	}
	return st
}

// Run serves until ctx is done. A batch in hand then is handed back (negatively acknowledged) so that another replica
// takes it at once; a batch in hand when the assignment changes is finished first.
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
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	go bus.WatchKV(watchCtx, w.nc, kv, wire.AssignKey(w.cfg.ID), w.onAssignment, nil)
	// A new plan changes routing, picked up with the next batch; a worker waiting for its first plan wakes up.
	cat := catalog.Watch(watchCtx, w.nc, kv, w.log, w.signal)
	go w.register(watchCtx)

	var cur *serving
	defer func() {
		if cur != nil {
			cur.exec.Close()
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
				cur.exec.Close()
				cur = nil
				w.serving.Store(nil)
			}
			// Without its pipeline's spec and plan a worker cannot execute or route: it waits for both.
			if next.a.Idle() || next.spec == nil || next.plan == nil {
				w.wait(ctx)
				continue
			}
			s, err := w.start(ctx, next, swapStart)
			if err != nil {
				w.log.Error("cannot serve assignment", "variant", next.a.Hop(), "err", err)
				w.wait(ctx)
				continue
			}
			cur = s
			name := next.a.Pipeline + ":" + next.a.Hop()
			w.serving.Store(&name)
		}
		cur.follow(next, w.log)
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

// ComplainAssignment is the pkg/ratelog key of an assignment the worker refused.
const ComplainAssignment = "assignment in KV refused; serving the last good one"

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
		fresh.err = err
		w.checked = fresh
		// A plan and its assignment arriving one before the other is no news, nor is an assignment read before the
		// catalog's first load (at the worker's start): only an assignment that cannot be right is.
		if err != nil && !errors.Is(err, plan.ErrEpoch) && !(errors.Is(err, plan.ErrNoPlan) && !loaded(cat)) {
			w.complaints.Error(ComplainAssignment, "err", err)
		}
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
}

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

// reconnectCheck is how often the registration loop looks for a re-established connection.
const reconnectCheck = 50 * time.Millisecond

// register refreshes the worker's registration every RegisterEvery, and at once when the connection comes back
// after a loss: the planner, which saw no heartbeat while the bus was away, knows the worker is alive without
// waiting a period.
func (w *Worker) register(ctx context.Context) {
	started := time.Now()
	var beat int64
	t := time.NewTicker(w.cfg.RegisterEvery)
	defer t.Stop()
	check := time.NewTicker(reconnectCheck)
	defer check.Stop()
	reconnects := w.nc.Stats().Reconnects
	for {
		beat++
		reg := Registration{ID: w.cfg.ID, Started: started, Updated: time.Now(), Variant: w.Serving(), Stats: w.Stats(),
			SwapMs: float64frombits(w.swapMs.Load()), Heartbeat: beat, Observed: w.Observations()}
		data, _ := json.Marshal(reg)
		if _, err := w.kv.Put(ctx, wire.WorkerKey(w.cfg.ID), data); err != nil && ctx.Err() == nil {
			w.log.Warn("registration refresh failed", "err", err)
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				break wait
			case <-check.C:
				if r := w.nc.Stats().Reconnects; r != reconnects && w.nc.IsConnected() {
					reconnects = r
					break wait
				}
			}
		}
	}
}

// serving is the variant a worker runs now.
type serving struct {
	a        plan.Assignment
	spec     *pipeline.Spec
	plan     *plan.Plan
	task     *pipeline.Task
	variant  *pipeline.Variant
	exec     executor.Executor
	consumer jetstream.Consumer
	hop      string
	policy   deadline.Policy
	budget   time.Duration // the task's latency budget on this variant: its profiled time at the max batch
	// stage is what the deadline policy knows of this variant under stagePlan.
	stage     *deadline.Stage
	stagePlan *plan.Plan
}

// refreshStage rebuilds the deadline stage when the plan has changed.
func (s *serving) refreshStage() {
	if s.stage != nil && s.plan == s.stagePlan {
		return
	}
	s.stagePlan = s.plan
	s.stage = deadline.NewStage(s.spec, s.plan, s.policy, s.a.Task, s.a.Variant, s.budget, 1)
}

// same says n is the variant s serves: the executor and the consumer stay. A new max batch, budget or epoch is
// followed in place (follow): a re-plan that keeps a worker's variant costs it no model reload.
func (s *serving) same(n wanted) bool {
	return s.a.Pipeline == n.a.Pipeline && s.a.Task == n.a.Task && s.a.Variant == n.a.Variant && s.spec == n.spec
}

// follow takes n's plan, and its max batch, budget and epoch when they changed (between batches: the next batch is
// sized by them).
func (s *serving) follow(n wanted, log *slog.Logger) {
	s.plan = n.plan
	if s.a == n.a || n.a.MaxBatch < 1 {
		return
	}
	if s.a.MaxBatch != n.a.MaxBatch || s.a.BudgetMs != n.a.BudgetMs {
		log.Info("serving", "pipeline", n.a.Pipeline, "variant", n.a.Hop(), "max_batch", n.a.MaxBatch,
			"epoch", n.a.Epoch, "swap", time.Duration(0))
	}
	s.a = n.a
	s.budget = time.Duration(n.a.BudgetMs * float64(time.Millisecond))
	s.stage = nil // built again with the new budget
}

// consumerBindWait bounds the wait for a variant's consumer; a worker that gives up serves again at the next change
// of its assignment or of a plan (the planner publishes routing every second while demand is reported).
const consumerBindWait = 5 * time.Second

func (w *Worker) start(ctx context.Context, n wanted, t0 time.Time) (*serving, error) {
	v := n.spec.Variant(n.a.Task, n.a.Variant)
	if v == nil {
		return nil, fmt.Errorf("pipeline %s has no variant %s", n.a.Pipeline, n.a.Hop())
	}
	if n.a.MaxBatch < 1 {
		return nil, fmt.Errorf("assignment %s: max batch %d", n.a.Hop(), n.a.MaxBatch)
	}
	exec, err := w.cfg.NewExecutor(n.spec, n.a.Task, n.a.Variant,
		executor.Options{Seed: w.cfg.Seed, ModelsDir: w.cfg.ModelsDir})
	if err != nil {
		return nil, err
	}
	// The planner creates the consumer, with its ack wait, before it assigns the variant; a worker only binds.
	bindCtx, cancel := context.WithTimeout(ctx, consumerBindWait)
	cons, err := bus.BindVariantConsumer(bindCtx, w.js, n.a.Pipeline, n.a.Task, n.a.Variant)
	cancel()
	if err != nil {
		exec.Close()
		return nil, err
	}
	swap := time.Since(t0)
	w.swapMs.Store(float64bits(float64(swap) / float64(time.Millisecond)))
	w.log.Info("serving", "pipeline", n.a.Pipeline, "variant", n.a.Hop(), "max_batch", n.a.MaxBatch,
		"epoch", n.a.Epoch, "swap", swap)
	policy, err := deadline.ParsePolicy(n.spec.DeadlinePolicy)
	if err != nil {
		exec.Close()
		return nil, err
	}
	budget := time.Duration(n.a.BudgetMs * float64(time.Millisecond))
	return &serving{a: n.a, spec: n.spec, plan: n.plan, task: n.spec.Task(n.a.Task), variant: v, exec: exec,
		consumer: cons, hop: n.a.Hop(), policy: policy, budget: budget}, nil
}

// fetchFirst waits (up to FetchWait) for one message of the variant's queue.
func (w *Worker) fetchFirst(s *serving) jetstream.Msg {
	batch, err := s.consumer.Fetch(1, jetstream.FetchMaxWait(w.cfg.FetchWait))
	if err != nil {
		// Disconnected, or the server is restarting: back off instead of spinning.
		w.log.Debug("fetch failed", "err", err)
		time.Sleep(100 * time.Millisecond)
		return nil
	}
	var first jetstream.Msg
	for m := range batch.Messages() {
		first = m
	}
	return first
}

// fetchMore takes, without waiting, the messages the batching rule adds to a batch whose first message gave taken
// items to execute (the first message's NumPending says how many wait, without a round trip).
func (w *Worker) fetchMore(s *serving, first jetstream.Msg, taken int) []jetstream.Msg {
	meta, err := first.Metadata()
	if err != nil {
		return nil
	}
	n := batching.More(s.a.MaxBatch, taken, int(meta.NumPending))
	if n == 0 {
		return nil
	}
	batch, err := s.consumer.FetchNoWait(n)
	if err != nil {
		return nil
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	return msgs
}

// inbound is one valid task message of a batch.
type inbound struct {
	msg       jetstream.Msg
	requestID string
	deadline  time.Time
	path      string // hops before this one
	replyTo   string
	enqueued  time.Time // when it reached this variant's queue: the start of its time at this task
	ctx       context.Context
	span      trace.Span
	items     []wire.Item
	outputs   []executor.Output // aligned with items; nil entries for items not executed
	status    []string          // per item: "" executed, or the item status it ends with here
	reason    []string
}

func (w *Worker) serveOnce(ctx context.Context, s *serving) {
	first := w.fetchFirst(s)
	if first == nil {
		return
	}
	var batch []*inbound
	var inputs []executor.Input
	var slots []slot
	s.refreshStage()
	now := time.Now()
	// take adds a message to the batch; false when the items it would execute do not fit (batching.Fits).
	take := func(m jetstream.Msg) bool {
		in, err := w.decode(ctx, m)
		if err != nil {
			w.discarded.Add(1)
			w.complaints.Warn("discarding invalid task message", "subject", m.Subject(), "err", err)
			_ = m.Term()
			return true
		}
		drop := s.stage.BeforeExecute(now, in.deadline, in.enqueued)
		if drop == "" && !batching.Fits(s.a.MaxBatch, len(inputs), len(in.items)) {
			in.span.End()
			return false
		}
		w.messages.Add(1)
		in.outputs = make([]executor.Output, len(in.items))
		in.status = make([]string, len(in.items))
		in.reason = make([]string, len(in.items))
		for i, it := range in.items {
			if drop != "" {
				in.status[i], in.reason[i] = wire.ItemDropped, drop
				continue
			}
			inputs = append(inputs, executor.Input{RequestID: in.requestID, ItemID: it.ID, Tensors: it.Inputs})
			slots = append(slots, slot{in: in, i: i})
		}
		batch = append(batch, in)
		return true
	}
	// Batch slots count items, and one message may carry several (a parent's items for one variant).
	take(first)
	more := w.fetchMore(s, first, len(inputs))
	for i, m := range more {
		if !take(m) {
			// It goes back to the queue, with the messages after it, in order: JetStream delivers them again, before
			// newer ones, to this replica's next batch or another's.
			for _, r := range more[i:] {
				_ = r.Nak()
			}
			w.returned.Add(uint64(len(more) - i))
			break
		}
	}
	// A batch that runs longer than a third of the ack wait is marked in progress, so that JetStream does not hand
	// it to another replica while this one is alive.
	done := make(chan struct{})
	defer close(done)
	go w.keepInProgress(s, batch, done)
	// Execute in model batches of at most MaxBatch items (one message may carry several items).
	for c := range batching.Chunks(len(inputs), s.a.MaxBatch) {
		lo := c * s.a.MaxBatch
		hi := min(lo+s.a.MaxBatch, len(inputs))
		outs, err := s.exec.Execute(ctx, inputs[lo:hi])
		w.batches.Add(1)
		if err == nil && len(outs) != hi-lo {
			err = fmt.Errorf("executor returned %d outputs for %d inputs", len(outs), hi-lo)
		}
		if err != nil && ctx.Err() != nil {
			// Shutting down: hand the whole batch back for another replica.
			for _, in := range batch {
				_ = in.msg.Nak()
				in.span.End()
			}
			return
		}
		for j := lo; j < hi; j++ {
			sl := slots[j]
			itemErr := err // the batch's, or else the item's own
			if itemErr == nil {
				itemErr = outs[j-lo].Err
			}
			if itemErr != nil {
				sl.in.status[sl.i], sl.in.reason[sl.i] = wire.ItemError, itemErr.Error()
				continue
			}
			sl.in.outputs[sl.i] = outs[j-lo]
		}
	}
	w.observe(s, func(o *Observed) {
		o.Batches += uint64(batching.Chunks(len(inputs), s.a.MaxBatch))
		for _, sl := range slots {
			if sl.in.status[sl.i] != "" {
				continue // failed
			}
			o.Items++
			o.QueueWaitMs += float64(now.Sub(sl.in.enqueued)) / float64(time.Millisecond)
			for child, subs := range sl.in.outputs[sl.i].Children {
				o.Children[child] += uint64(len(subs))
			}
		}
	})
	for _, in := range batch {
		if err := w.forward(ctx, s, in); err != nil {
			// Not acknowledged: JetStream delivers the message again; sub-requests already published are
			// de-duplicated by their message ids.
			w.log.Warn("forwarding failed; message will be redelivered", "request", in.requestID, "err", err)
			_ = in.msg.NakWithDelay(100 * time.Millisecond)
		} else {
			_ = in.msg.Ack()
		}
		in.span.End()
	}
}

// keepInProgress tells JetStream the batch's messages are being worked on, every third of the ack wait, until done.
func (w *Worker) keepInProgress(s *serving, batch []*inbound, done <-chan struct{}) {
	wait := w.cfg.AckWait
	if info := s.consumer.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		wait = info.Config.AckWait
	}
	t := time.NewTicker(wait / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			for _, in := range batch {
				_ = in.msg.InProgress()
			}
		}
	}
}

type slot struct {
	in *inbound
	i  int
}

// decode validates one message of the variant's subject.
func (w *Worker) decode(ctx context.Context, m jetstream.Msg) (*inbound, error) {
	h := m.Headers()
	in := &inbound{msg: m, requestID: h.Get(wire.HeaderRequestID), path: h.Get(wire.HeaderPath),
		replyTo: h.Get(wire.HeaderReplyTo)}
	if in.requestID == "" {
		return nil, errors.New("no " + wire.HeaderRequestID + " header")
	}
	if !strings.HasPrefix(in.replyTo, wire.ResultPrefix) {
		return nil, fmt.Errorf("%s header %q is not a result subject", wire.HeaderReplyTo, in.replyTo)
	}
	d, err := wire.ParseDeadline(h.Get(wire.HeaderDeadline))
	if err != nil {
		return nil, err
	}
	in.deadline = d
	in.enqueued = time.Now()
	if meta, err := m.Metadata(); err == nil {
		in.enqueued = meta.Timestamp
	}
	var tm wire.TaskMessage
	if err := wire.UnmarshalMsgpack(m.Data(), &tm); err != nil {
		return nil, fmt.Errorf("payload is not a msgpack task message: %w", err)
	}
	if len(tm.Items) == 0 {
		return nil, errors.New("task message has no items")
	}
	for _, it := range tm.Items {
		if it.ID == "" || it.Den == 0 {
			return nil, fmt.Errorf("item %q has no id or weight", it.ID)
		}
	}
	in.items = tm.Items
	in.ctx, in.span = w.tracer.Start(otel.GetTextMapPropagator().Extract(ctx, bus.HeaderCarrier(h)),
		"execute "+m.Subject(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("sleipnir.request_id", in.requestID),
			attribute.Int("sleipnir.items", len(tm.Items))))
	return in, nil
}

// forward publishes the sub-requests of one message's items, grouped per destination variant, and reports its
// leaves (finished, dropped or failed items) to the request's frontend.
func (w *Worker) forward(ctx context.Context, s *serving, in *inbound) error {
	path := wire.AppendHop(in.path, s.a.Task, s.a.Variant)
	var routes map[string][]plan.Route
	if s.plan != nil {
		routes = s.plan.Routing.Downstream[s.hop]
	}
	var leaves []wire.ItemResult
	var acks []jetstream.PubAckFuture
	now := time.Now()
	atTask, left := now.Sub(in.enqueued), in.deadline.Sub(now)
	s.refreshStage()
	for i, it := range in.items {
		st := in.status[i]
		if st == "" {
			w.items.Add(1)
		}
		out := in.outputs[i]
		k := out.NumChildren()
		if st != "" || k == 0 {
			if st == "" {
				st = wire.ItemOK
			}
			switch st {
			case wire.ItemDropped:
				w.countDrop(s, in.reason[i])
			case wire.ItemError:
				w.failed.Add(1)
			}
			leaves = append(leaves, wire.ItemResult{ID: it.ID, Den: it.Den, Path: wire.SplitPath(path),
				Status: st, Reason: in.reason[i], Outputs: out.Tensors})
			continue
		}
		den := it.Den * uint64(k)
		if den/uint64(k) != it.Den {
			leaves = append(leaves, wire.ItemResult{ID: it.ID, Den: it.Den, Path: wire.SplitPath(path),
				Status: wire.ItemError, Reason: "fan-out too deep: item weight overflows"})
			w.failed.Add(1)
			continue
		}
		// Children are numbered across child tasks in a fixed order, so a re-execution names them the same.
		groups := map[string]*wire.TaskMessage{} // destination "task/variant" -> items
		var order []string
		n := 0
		for _, child := range s.task.Children {
			for _, inputs := range out.Children[child] {
				id := wire.ChildItemID(it.ID, n)
				n++
				d := s.stage.Route(child, routes[child], now, atTask, left, w.rng.Float64(), w.rng.Float64())
				v, reason := d.Variant, d.Reason
				if d.Rerouted {
					w.rerouted.Add(1)
					w.observe(s, func(o *Observed) { o.Rerouted++ })
				}
				if v == "" {
					leaves = append(leaves, wire.ItemResult{ID: id, Den: den, Path: wire.SplitPath(path),
						Status: wire.ItemDropped, Reason: reason})
					w.countDrop(s, reason)
					continue
				}
				dest := wire.Hop(child, v)
				g, ok := groups[dest]
				if !ok {
					g = &wire.TaskMessage{}
					groups[dest] = g
					order = append(order, dest)
				}
				g.Items = append(g.Items, wire.Item{ID: id, Den: den, Inputs: inputs})
			}
		}
		for _, dest := range order {
			task, variant, _ := strings.Cut(dest, "/")
			msg, err := w.taskMsg(in, s.a.Pipeline, task, variant, path, it.ID, groups[dest])
			if err != nil {
				return err
			}
			f, err := w.js.PublishMsgAsync(msg)
			if err != nil {
				return fmt.Errorf("publish to %s: %w", msg.Subject, err)
			}
			acks = append(acks, f)
		}
	}
	if len(leaves) > 0 {
		data, err := msgpack.Marshal(&wire.ResultMessage{RequestID: in.requestID, Items: leaves})
		if err != nil {
			return err
		}
		if err := w.nc.Publish(in.replyTo, data); err != nil {
			return fmt.Errorf("report to %s: %w", in.replyTo, err)
		}
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish to %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *Worker) taskMsg(in *inbound, pipelineName, task, variant, path, parent string, tm *wire.TaskMessage) (*nats.Msg, error) {
	data, err := msgpack.Marshal(tm)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(wire.TaskSubject(pipelineName, task, variant))
	msg.Data = data
	msg.Header.Set(wire.HeaderRequestID, in.requestID)
	msg.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(in.deadline))
	msg.Header.Set(wire.HeaderPath, path)
	msg.Header.Set(wire.HeaderReplyTo, in.replyTo)
	msg.Header.Set(wire.HeaderMsgID, wire.TaskMsgID(in.requestID, parent, task, variant))
	otel.GetTextMapPropagator().Inject(in.ctx, bus.HeaderCarrier(msg.Header))
	return msg, nil
}

func float64bits(f float64) uint64     { return math.Float64bits(f) }
func float64frombits(b uint64) float64 { return math.Float64frombits(b) }

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
