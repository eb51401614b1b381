// Package planner is the planner service: it publishes each pipeline's spec and plan to the KV bucket, creates the
// streams and consumers the plan needs, and assigns the live workers to the plan's variant replicas, changing as few
// assignments as possible when workers come and go.
package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config is the planner's configuration.
type Config struct {
	// Pipelines to serve.
	Pipelines []*pipeline.Spec
	// Storage of the task streams and the KV bucket.
	Storage jetstream.StorageType
	// WorkerTimeout is how long a worker may go without refreshing its registration before it is treated as gone.
	WorkerTimeout time.Duration
	// AckWait of the variant consumers.
	AckWait time.Duration
	// System is the system that plans (control.ParseSystem: loki, the default, inferline, proteus or static,
	// optionally with a deadline policy); its deadline policy goes into the specs the planner publishes.
	System string
	// Config tunes the control loop: when to re-plan and re-route, and the solves (see pkg/control; the solves'
	// time limit defaults to 1 s here).
	control.Config
	// DemandAlpha is the weight of the newest demand report in the moving average (default 0.3).
	DemandAlpha float64
	// DemandWarmup is how long the planner gathers demand reports, after none were coming in, before their total
	// moves the estimate (default 2 s: frontends report every second, out of step). See pkg/demand.
	DemandWarmup time.Duration
	// MaxReportQPS is the largest rate one frontend's demand report may claim (default 50000, beyond what one
	// frontend accepts); reports above it are refused and counted.
	MaxReportQPS float64
	Logger       *slog.Logger
}

func (c *Config) setDefaults() {
	if c.WorkerTimeout == 0 {
		c.WorkerTimeout = 5 * time.Second
	}
	c.Config.SetDefaults()
	if c.System == "" {
		c.System = "loki"
	}
	if c.SolveTimeLimit == 0 {
		c.SolveTimeLimit = time.Second
	}
	if c.DemandWarmup == 0 {
		c.DemandWarmup = 2 * time.Second
	}
	if c.MaxReportQPS == 0 {
		c.MaxReportQPS = 50000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("service", "planner")
}

// Complaints the planner counts (pkg/ratelog keys).
const (
	complainReport       = "demand report refused"
	complainRegistration = "worker registration refused"
	complainTampered     = "rewrote a value in KV the planner did not write"
	complainStoredPlan   = "plan in KV refused; publishing a new one"
)

// Planner keeps the plans in the KV bucket and the workers assigned.
type Planner struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	log *slog.Logger

	complaints *ratelog.Limiter

	mu         sync.Mutex
	specs      []*pipeline.Spec
	demand     map[string]*demand.Estimator       // per pipeline, under mu
	fanout     map[string]*demand.FanoutEstimator // per pipeline, under mu
	taskDemand map[string]*demand.TaskDemand      // per pipeline, under mu
	// counters folds the workers' heartbeats into what is new since each one's previous; under mu.
	counters *demand.Counters
	// systems are the pipelines' systems (the configured one, per spec), aligned with cfg.Pipelines.
	systems []control.System
	loops   []*control.Loop   // per pipeline, aligned with specs; only Run's goroutine uses them
	live    *control.Liveness // under mu
	// reconnects is the connection's reconnect count when liveness last looked; under mu.
	reconnects   uint64
	workersReady atomic.Bool // the worker watch delivered the registrations already in the bucket
	assign       map[string]plan.Assignment
	// written is, per key the planner writes (spec, plan, assign), the value and revision of its last write;
	// tampered the keys someone else wrote since. Under mu.
	written  map[string]writtenValue
	tampered map[string]bool
	changed  chan struct{}
	// quietUntil suppresses the shortage warning while workers are still registering.
	quietUntil time.Time
	unplaced   int // replicas without a worker at the last assignment
}

// New prepares a planner on a connection; Run serves.
func New(nc *nats.Conn, cfg Config) (*Planner, error) {
	cfg.setDefaults()
	if len(cfg.Pipelines) == 0 {
		return nil, errors.New("planner: no pipeline to serve")
	}
	// The system's deadline policy is the published spec's: the workers read it there.
	specs := make([]*pipeline.Spec, len(cfg.Pipelines))
	systems := make([]control.System, len(cfg.Pipelines))
	for i, s := range cfg.Pipelines {
		sys, err := control.ParseSystem(cfg.System, s, cfg.Config)
		if err != nil {
			return nil, fmt.Errorf("planner: %w", err)
		}
		specs[i], systems[i] = s, sys
		if string(sys.Policy) != s.DeadlinePolicy {
			c := *s
			c.DeadlinePolicy = string(sys.Policy)
			specs[i] = &c
		}
	}
	cfg.Pipelines = specs
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	est := map[string]*demand.Estimator{}
	fan := map[string]*demand.FanoutEstimator{}
	tasks := map[string]*demand.TaskDemand{}
	for _, s := range cfg.Pipelines {
		e := cfg.Config.DemandEstimator(cfg.DemandAlpha)
		e.Warmup, e.MaxRate = cfg.DemandWarmup, cfg.MaxReportQPS
		est[s.Name] = e
		fan[s.Name] = demand.NewFanoutEstimator(cfg.DemandAlpha, 0)
		// Tasks below the root: the root's demand is the frontends' reports.
		var below []string
		for _, t := range s.Tasks {
			if t.Name != s.Root().Name {
				below = append(below, t.Name)
			}
		}
		tasks[s.Name] = demand.NewTaskDemand(below, func() *demand.Estimator {
			return cfg.Config.DemandEstimator(cfg.DemandAlpha)
		})
	}
	return &Planner{cfg: cfg, nc: nc, js: js, log: cfg.Logger, complaints: ratelog.New(cfg.Logger, 0, 0),
		live: control.NewLiveness(cfg.WorkerTimeout), demand: est, fanout: fan, taskDemand: tasks, systems: systems,
		counters: demand.NewCounters(), assign: map[string]plan.Assignment{},
		written: map[string]writtenValue{}, tampered: map[string]bool{}, changed: make(chan struct{}, 1)}, nil
}

// Complaints counts the bad input the planner refused or repaired, by kind.
func (p *Planner) Complaints() map[string]uint64 { return p.complaints.Counts() }

// writtenValue is the planner's last write of a key: its value (nil: deleted) and the revision the bucket gave it.
type writtenValue struct {
	value    []byte
	revision uint64
}

// Run publishes the plans and assigns workers until ctx is done.
func (p *Planner) Run(ctx context.Context) error {
	kv, err := bus.OpenBucket(ctx, p.js, p.cfg.Storage)
	if err != nil {
		return fmt.Errorf("planner: open KV bucket: %w", err)
	}
	p.kv = kv
	p.reconnects = p.nc.Stats().Reconnects
	for i, spec := range p.cfg.Pipelines {
		alloc := p.systems[i].Allocator // nil: static
		// A restarted planner resumes the plan it (or its predecessor) left in the bucket: the workers serve it,
		// and the demand it was sized for is a better estimate than the nothing a new planner knows.
		if alloc != nil {
			if pl := p.storedPlan(ctx, spec); pl != nil {
				if err := p.resume(ctx, spec, pl); err != nil {
					return err
				}
				p.specs = append(p.specs, spec)
				p.loops = append(p.loops, control.Resume(spec, p.cfg.Config, alloc, pl, time.Now()))
				continue
			}
		}
		pl, err := p.publish(ctx, spec)
		if err != nil {
			return err
		}
		p.specs = append(p.specs, spec)
		p.loops = append(p.loops, control.New(spec, p.cfg.Config, alloc, pl))
	}
	reports, err := p.nc.Subscribe(wire.DemandPrefix+"*", p.onDemand)
	if err != nil {
		return err
	}
	defer reports.Unsubscribe()
	if err := p.loadAssignments(ctx); err != nil {
		return err
	}
	go bus.WatchKV(ctx, p.nc, kv, wire.WorkerKeys.Pattern(), p.onWorker, func() { p.workersReady.Store(true) })
	// What the planner writes, it keeps: a value someone else wrote is put back (see onWritten).
	for _, keys := range []wire.KeyKind{wire.SpecKeys, wire.PlanKeys, wire.AssignKeys} {
		go bus.WatchKV(ctx, p.nc, kv, keys.Pattern(), p.onWritten, nil)
	}
	// Workers register within a refresh period of the planner's start; a shortage before that is no news.
	p.quietUntil = time.Now().Add(p.cfg.WorkerTimeout)

	tick := time.NewTicker(p.cfg.WorkerTimeout / 5)
	defer tick.Stop()
	demandTick := time.NewTicker(estimateEvery)
	defer demandTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.changed:
		case <-tick.C:
		case now := <-demandTick.C:
			// Until the registrations already in the bucket are read, the live workers are not known.
			if p.workersReady.Load() {
				p.step(ctx, now, p.estimate(now))
			}
			p.repair(ctx)
			continue
		}
		p.repair(ctx)
		if !p.workersReady.Load() {
			continue
		}
		if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("assigning workers failed; will retry", "err", err)
		}
	}
}

// estimateEvery is how often the planner folds what was reported into its estimates and runs the control loops.
const estimateEvery = time.Second

// estimates are a pipeline's demand and multiplicative factors as of the latest tick.
type estimates struct {
	demand  float64
	window  time.Duration // the span demand averages over: see control.Observed.DemandWindow
	unknown bool          // no demand measured yet: see control.Observed.DemandUnknown
	fanout  map[string]pipeline.Fanout
	samples map[string]float64 // items behind each factor: see control.Observed.FanoutSamples
	tasks   map[string]float64 // items per second reaching each task: see control.Observed.TaskDemand
}

// estimate folds the reports since the last tick into each pipeline's estimates.
func (p *Planner) estimate(now time.Time) []estimates {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]estimates, len(p.specs))
	for i, spec := range p.specs {
		fe := p.fanout[spec.Name]
		fe.Tick()
		e := p.demand[spec.Name]
		out[i] = estimates{demand: e.Tick(now), window: e.Window(), unknown: !e.Known(), fanout: fe.Estimate(spec),
			samples: fe.Samples(), tasks: p.taskDemand[spec.Name].Tick(now, estimateEvery)}
	}
	return out
}

// liveWorkers are the workers whose registration is fresh, in name order (control.Liveness): while the planner's
// connection is down, and for a WorkerTimeout after it is back, no worker is expired for the heartbeats the bus
// could not carry.
func (p *Planner) liveWorkers(now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.nc.Stats().Reconnects; r != p.reconnects || !p.nc.IsConnected() {
		p.reconnects = r
		p.live.Grace(now)
	}
	return p.live.Live(now)
}

// serversFor is the share of the live workers pipeline i may use: an even split, the first pipelines taking the
// remainder.
func (p *Planner) serversFor(i, live int) int {
	n := len(p.specs)
	share := live / n
	if i < live%n {
		share++
	}
	return share
}

// step runs each pipeline's control loop (pkg/control) once: a new allocation when the demand estimate, the
// multiplicative factors or the pipeline's share of the live workers moved, or new routing tables; publishes what it
// decided, and reassigns the workers after a new allocation, moving as few as possible. Then it moves what waits at
// variants the plan in force retired (rehome).
func (p *Planner) step(ctx context.Context, now time.Time, ests []estimates) {
	live := len(p.liveWorkers(now))
	for i, spec := range p.specs {
		o := control.Observed{Demand: ests[i].demand, DemandWindow: ests[i].window, DemandUnknown: ests[i].unknown,
			Fanout: ests[i].fanout, FanoutSamples: ests[i].samples, TaskDemand: ests[i].tasks,
			Servers: p.serversFor(i, live)}
		p.stepPipeline(ctx, now, i, o)
		p.rehome(ctx, spec, p.loops[i].Current())
	}
}

// stepPipeline runs pipeline i's control loop once (see step).
func (p *Planner) stepPipeline(ctx context.Context, now time.Time, i int, o control.Observed) {
	spec := p.specs[i]
	st := p.loops[i].Next(now, o)
	if st.Err != nil {
		p.log.Warn("allocation failed; the current plan stays", "pipeline", spec.Name, "demand_qps",
			round(o.Demand), "servers", o.Servers, "err", st.Err)
	}
	pl := st.Plan
	if pl == nil {
		return
	}
	if st.Replanned {
		if err := p.ensureConsumers(ctx, spec, pl); err != nil {
			p.log.Warn("creating consumers for a new plan failed; will retry", "pipeline", spec.Name, "err", err)
			return
		}
	}
	if err := p.putPlan(ctx, pl); err != nil {
		p.log.Warn("publishing a plan failed; will retry", "pipeline", spec.Name, "err", err)
		return
	}
	p.loops[i].Published(st, o, now)
	if !st.Replanned {
		p.log.Debug("routing published", "pipeline", spec.Name, "demand_qps", round(o.Demand))
		return
	}
	a := pl.Allocation
	p.log.Info("plan published", "pipeline", spec.Name, "epoch", pl.Epoch, "mode", pl.Mode,
		"estimate_qps", round(a.Estimate()), "demand_qps", round(a.DemandQPS), "active_servers", a.ActiveServers,
		"servers", o.Servers,
		"system_accuracy", round(a.SystemAccuracy), "optimal", a.Optimal, "gap", round(a.Gap),
		"solve_ms", a.SolveMs)
	if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("assigning workers failed; will retry", "err", err)
	}
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

// rehomeBatch is how many messages rehome fetches from a variant's queue at a time.
const rehomeBatch = 256

// rehome moves the messages queued at the variants of spec that pl, the plan in force, hosts no replica of (a new
// plan retired them while the messages waited; no replica is left to fetch them, and they would wait out their
// deadlines) to the variants pl routes their task to from their upstream hop (plan.Rehome, which the simulator
// calls too): each is published again with its headers, under a message id of its own (wire.RehomedMsgID), then
// acknowledged. It runs every second, so messages that upstream workers sent on the old routing just before they
// saw the new one follow within a second. A variant never hosted has no consumer and costs one lookup.
func (p *Planner) rehome(ctx context.Context, spec *pipeline.Spec, pl *plan.Plan) {
	for _, t := range spec.Tasks {
		for _, v := range t.Variants {
			if pl.Hosts(t.Name, v.Name) {
				continue
			}
			moved, err := p.rehomeQueue(ctx, spec.Name, t.Name, v.Name, pl)
			if err != nil && ctx.Err() == nil {
				p.log.Warn("moving the queue of a retired variant failed; will retry", "pipeline", spec.Name,
					"variant", wire.Hop(t.Name, v.Name), "moved", moved, "err", err)
			} else if moved > 0 {
				p.log.Info("moved the queue of a retired variant", "pipeline", spec.Name,
					"variant", wire.Hop(t.Name, v.Name), "moved", moved)
			}
		}
	}
}

// rehomeQueue moves what waits in one retired variant's queue (see rehome) and returns how many messages it moved.
// A message pl routes nowhere is negatively acknowledged, to wait for a later plan.
func (p *Planner) rehomeQueue(ctx context.Context, pipelineName, task, variant string, pl *plan.Plan) (int, error) {
	cons, err := p.js.Consumer(ctx, wire.TaskStream(pipelineName), wire.Consumer(task, variant))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	moved := 0
	for left := cons.CachedInfo().NumPending; left > 0; {
		batch, err := cons.FetchNoWait(int(min(left, rehomeBatch)))
		if err != nil {
			return moved, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			upstream := plan.Upstream(wire.SplitPath(m.Headers().Get(wire.HeaderPath)))
			to := pl.Rehome(task, variant, upstream, rand.Float64())
			if to == "" {
				_ = m.Nak()
				continue
			}
			out := nats.NewMsg(wire.TaskSubject(pipelineName, task, to))
			for k, v := range m.Headers() {
				out.Header[k] = v
			}
			if id := m.Headers().Get(wire.HeaderMsgID); id != "" {
				out.Header.Set(wire.HeaderMsgID, wire.RehomedMsgID(id, to))
			}
			out.Data = m.Data()
			if _, err := p.js.PublishMsg(ctx, out); err != nil {
				_ = m.Nak()
				return moved, fmt.Errorf("publish to %s: %w", out.Subject, err)
			}
			// Acknowledged with the server's confirmation: once rehome returns, the message is gone from the queue.
			if err := m.DoubleAck(ctx); err != nil {
				return moved, err // redelivered after the ack wait; the next rehome's publish is de-duplicated
			}
			moved++
		}
		if err := batch.Error(); err != nil {
			return moved, err
		}
		if got == 0 {
			break
		}
		left -= uint64(got)
	}
	return moved, nil
}

// ensureConsumers creates the durable consumer of every variant a plan hosts.
func (p *Planner) ensureConsumers(ctx context.Context, spec *pipeline.Spec, pl *plan.Plan) error {
	for _, v := range pl.Variants {
		if _, err := bus.EnsureVariantConsumer(ctx, p.js, spec.Name, v.Task, v.Variant, p.cfg.AckWait); err != nil {
			return fmt.Errorf("consumer of %s/%s: %w", v.Task, v.Variant, err)
		}
	}
	return nil
}

func (p *Planner) onDemand(m *nats.Msg) {
	name := strings.TrimPrefix(m.Subject, wire.DemandPrefix)
	var r wire.DemandReport
	if err := wire.UnmarshalMsgpack(m.Data, &r); err != nil {
		p.complaints.Warn(complainReport, "pipeline", name, "err", err)
		return
	}
	if !wire.ValidName(r.Frontend) {
		p.complaints.Warn(complainReport, "pipeline", name, "err", fmt.Sprintf("frontend id %q", r.Frontend))
		return
	}
	interval := time.Duration(r.IntervalMs * float64(time.Millisecond))
	if math.IsNaN(r.IntervalMs) || math.IsInf(r.IntervalMs, 0) {
		interval = 0
	}
	p.mu.Lock()
	e := p.demand[name]
	var err error
	if e != nil {
		err = e.Observe(r.Frontend, r.Count, interval, time.Now())
	}
	p.mu.Unlock()
	if err != nil {
		p.complaints.Warn(complainReport, "pipeline", name, "frontend", r.Frontend, "err", err)
	}
}

func (p *Planner) putPlan(ctx context.Context, pl *plan.Plan) error {
	data, err := json.Marshal(pl)
	if err != nil {
		return err
	}
	return p.put(ctx, wire.PlanKey(pl.Pipeline), data)
}

// put writes key and remembers the write, so that onWritten tells it from someone else's.
func (p *Planner) put(ctx context.Context, key string, data []byte) error {
	p.mu.Lock()
	p.written[key] = writtenValue{value: data, revision: p.written[key].revision}
	p.mu.Unlock()
	rev, err := p.kv.Put(ctx, key, data)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if w := p.written[key]; bytes.Equal(w.value, data) && rev > w.revision {
		p.written[key] = writtenValue{value: data, revision: rev}
	}
	p.mu.Unlock()
	return nil
}

// deleteKey deletes key and remembers that the planner did.
func (p *Planner) deleteKey(ctx context.Context, key string) error {
	p.mu.Lock()
	p.written[key] = writtenValue{revision: p.written[key].revision}
	p.mu.Unlock()
	if err := p.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

// onWritten sees every write to the keys the planner owns (spec.*, plan.*, assign.*). One that is not the
// planner's (a value other than its last write, or a deletion of a key it wrote) is marked for repair: the planner
// puts its value back. Server permissions keep strangers out; this is the second line.
func (p *Planner) onWritten(e jetstream.KeyValueEntry) {
	key := e.Key()
	p.mu.Lock()
	w, ours := p.written[key]
	var foreign bool
	switch {
	case ours && e.Revision() <= w.revision:
		// The planner's own write, or an older one.
	case !ours:
		// Only assignments are the planner's whether it wrote them or not: it assigns every worker.
		_, assignment := wire.AssignKeys.Name(key)
		foreign = assignment && e.Operation() == jetstream.KeyValuePut
	case e.Operation() == jetstream.KeyValuePut:
		foreign = !bytes.Equal(e.Value(), w.value)
	default:
		foreign = ours && w.value != nil
	}
	if foreign {
		p.tampered[key] = true
	}
	p.mu.Unlock()
	if foreign {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// repair puts back the keys someone else wrote: the planner's last value, or, for a key it never wrote (an
// assignment of a worker it does not know), deletes it. A spec or plan of a pipeline the planner does not serve is
// none of its business.
func (p *Planner) repair(ctx context.Context) {
	p.mu.Lock()
	keys := make([]string, 0, len(p.tampered))
	for k := range p.tampered {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		p.mu.Lock()
		w, ours := p.written[key]
		p.mu.Unlock()
		_, assignment := wire.AssignKeys.Name(key)
		var err error
		switch {
		case ours && w.value != nil:
			err = p.put(ctx, key, w.value)
		case assignment:
			err = p.deleteKey(ctx, key)
		}
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("repairing a value in KV failed; will retry", "key", key, "err", err)
			}
			continue
		}
		p.mu.Lock()
		delete(p.tampered, key)
		p.mu.Unlock()
		p.complaints.Warn(complainTampered, "key", key)
	}
}

// publish writes a pipeline's spec and first plan (control.FirstPlan), after the stream and consumers the plan
// needs.
func (p *Planner) publish(ctx context.Context, spec *pipeline.Spec) (*plan.Plan, error) {
	pl, err := control.FirstPlan(spec)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	if _, err := bus.EnsureTaskStream(ctx, p.js, spec.Name, p.cfg.Storage); err != nil {
		return nil, fmt.Errorf("pipeline %s: task stream: %w", spec.Name, err)
	}
	if err := p.ensureConsumers(ctx, spec, pl); err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := p.put(ctx, wire.SpecKey(spec.Name), specJSON); err != nil {
		return nil, fmt.Errorf("pipeline %s: publish spec: %w", spec.Name, err)
	}
	// The epoch continues from the plan already in the bucket, so workers can tell a new plan from an old one
	// across planner restarts.
	if e, err := p.kv.Get(ctx, wire.PlanKey(spec.Name)); err == nil {
		var old plan.Plan
		if json.Unmarshal(e.Value(), &old) == nil && old.Epoch < math.MaxUint32 {
			pl.Epoch = old.Epoch
		}
	}
	pl.Epoch++
	if err := p.putPlan(ctx, pl); err != nil {
		return nil, fmt.Errorf("pipeline %s: publish plan: %w", spec.Name, err)
	}
	p.log.Info("plan published", "pipeline", spec.Name, "epoch", pl.Epoch, "mode", pl.Mode, "servers", pl.Servers())
	return pl, nil
}

// storedPlan is the plan of spec already in the bucket, when there is one and it passes validation against spec.
func (p *Planner) storedPlan(ctx context.Context, spec *pipeline.Spec) *plan.Plan {
	e, err := p.kv.Get(ctx, wire.PlanKey(spec.Name))
	if err != nil {
		return nil
	}
	var pl *plan.Plan
	if err := json.Unmarshal(e.Value(), &pl); err == nil {
		err = pl.Validate(spec)
	}
	if err != nil {
		p.complaints.Warn(complainStoredPlan, "pipeline", spec.Name, "err", err)
		return nil
	}
	return pl
}

// resume publishes spec and serves pl, the plan found in the bucket, as its own: its streams and consumers exist,
// it is written back unchanged (same epoch: no worker moves), and the demand and multiplicative-factor estimates
// start from what it was sized for.
func (p *Planner) resume(ctx context.Context, spec *pipeline.Spec, pl *plan.Plan) error {
	if _, err := bus.EnsureTaskStream(ctx, p.js, spec.Name, p.cfg.Storage); err != nil {
		return fmt.Errorf("pipeline %s: task stream: %w", spec.Name, err)
	}
	if err := p.ensureConsumers(ctx, spec, pl); err != nil {
		return fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := p.put(ctx, wire.SpecKey(spec.Name), specJSON); err != nil {
		return fmt.Errorf("pipeline %s: publish spec: %w", spec.Name, err)
	}
	if err := p.putPlan(ctx, pl); err != nil {
		return fmt.Errorf("pipeline %s: publish plan: %w", spec.Name, err)
	}
	p.mu.Lock()
	if a := pl.Allocation; a != nil {
		p.demand[spec.Name].Seed(a.Estimate())
	}
	for hop, f := range pl.Fanout { // validated: the spec has hop
		task, _, _ := strings.Cut(hop, "/")
		p.fanout[spec.Name].Seed(hop, f, spec.Task(task).Children)
	}
	p.mu.Unlock()
	p.log.Info("plan resumed from KV", "pipeline", spec.Name, "epoch", pl.Epoch, "mode", pl.Mode,
		"servers", pl.Servers())
	return nil
}

// loadAssignments reads the assignments already in the bucket, so a restarted planner moves no worker needlessly.
// One that is not an assignment of a variant the planner serves is left out (and so replaced).
func (p *Planner) loadAssignments(ctx context.Context) error {
	lister, err := p.kv.ListKeysFiltered(ctx, wire.AssignKeys.Pattern())
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		e, err := p.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		id, _ := wire.AssignKeys.Name(key)
		var a plan.Assignment
		if json.Unmarshal(e.Value(), &a) != nil || a.Worker != id {
			continue
		}
		if sp := p.spec(a.Pipeline); !a.Idle() && (sp == nil || sp.Variant(a.Task, a.Variant) == nil) {
			continue
		}
		p.assign[id] = a
		p.mu.Lock()
		p.written[key] = writtenValue{value: e.Value(), revision: e.Revision()}
		p.mu.Unlock()
	}
	return nil
}

// spec is the spec of a pipeline the planner serves; nil otherwise.
func (p *Planner) spec(name string) *pipeline.Spec {
	for _, s := range p.cfg.Pipelines {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (p *Planner) onWorker(e jetstream.KeyValueEntry) {
	id, _ := wire.WorkerKeys.Name(e.Key())
	var changed bool
	if e.Operation() == jetstream.KeyValuePut {
		var reg wire.Registration
		err := json.Unmarshal(e.Value(), &reg)
		if err == nil {
			err = plan.ValidateRegistration(id, reg, e.Created())
		}
		if err != nil {
			p.complaints.Warn(complainRegistration, "key", e.Key(), "err", err)
			return
		}
		p.mu.Lock()
		changed = p.live.Seen(id, e.Created())
		p.foldObservations(id, reg)
		p.mu.Unlock()
	} else {
		p.mu.Lock()
		changed = p.live.Forget(id)
		p.counters.Forget(id)
		p.mu.Unlock()
	}
	if changed {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// foldObservations adds what a worker measured since its previous heartbeat to the multiplicative-factor
// estimates, and the sub-requests its variants emitted to the demand of the tasks they went to. Called with mu held.
func (p *Planner) foldObservations(id string, reg wire.Registration) {
	for key, delta := range p.counters.Fold(id, reg) {
		name, hop, found := strings.Cut(key, ":")
		fe, spec := p.fanout[name], p.spec(name)
		if !found || fe == nil || spec == nil {
			continue
		}
		fe.Observe(hop, delta)
		task, _, _ := strings.Cut(hop, "/")
		if t := spec.Task(task); t != nil && delta.Items > 0 {
			for _, child := range t.Children {
				p.taskDemand[name].Add(child, delta.Children[child])
			}
		}
	}
}

// reassign recomputes the assignments for the live workers and writes the ones that changed.
func (p *Planner) reassign(ctx context.Context) error {
	live := p.liveWorkers(time.Now())
	p.mu.Lock()
	prev := p.assign
	p.mu.Unlock()

	plans := make([]*plan.Plan, len(p.loops))
	for i, l := range p.loops {
		plans[i] = l.Current()
	}
	next, unplaced := plan.Assign(plans, live, prev)
	for id, a := range next {
		if old, ok := prev[id]; ok && old == a {
			continue
		}
		data, _ := json.Marshal(a)
		if err := p.put(ctx, wire.AssignKey(id), data); err != nil {
			return err
		}
		if a.Idle() {
			p.log.Info("worker idle", "worker", id)
		} else {
			p.log.Info("worker assigned", "worker", id, "pipeline", a.Pipeline, "variant", a.Hop(), "max_batch", a.MaxBatch)
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			// Gone: remove its assignment so a returning worker starts idle until assigned again.
			if err := p.deleteKey(ctx, wire.AssignKey(id)); err != nil {
				return err
			}
			p.log.Info("worker gone", "worker", id, "was", prev[id].Hop())
		}
	}
	p.mu.Lock()
	p.assign = next
	p.mu.Unlock()
	if unplaced != p.unplaced && time.Now().After(p.quietUntil) {
		if unplaced > 0 {
			p.log.Warn("not enough workers for the plan", "replicas_unplaced", unplaced, "workers", len(live))
		} else {
			p.log.Info("every planned replica has a worker", "workers", len(live))
		}
		p.unplaced = unplaced
	}
	return nil
}
