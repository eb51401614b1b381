// Package planner is the planner service: it publishes each pipeline's spec and plan to the KV bucket, creates the
// streams and consumers the plan needs, and assigns the live workers to the plan's variant replicas, changing as few
// assignments as possible when workers come and go.
package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/tuner"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config is the planner's configuration.
type Config struct {
	// Pipelines to serve.
	Pipelines []*pipeline.Spec
	// Storage of the task streams and the KV bucket.
	Storage jetstream.StorageType
	// Replicas is how many copies of the task streams and the KV bucket the servers keep (0: bus.DefaultReplicas,
	// 3 on a cluster of three or more); a stream that already has more keeps them.
	Replicas int
	// WorkerTimeout is how long a worker may go without refreshing its registration before it is treated as gone.
	WorkerTimeout time.Duration
	// AckWait of the variant consumers.
	AckWait time.Duration
	// DeadLetterMaxAge and DeadLetterMaxBytes bound the dead-letter stream's retention (0: bus's defaults, a week
	// and 256 MiB).
	DeadLetterMaxAge   time.Duration
	DeadLetterMaxBytes int64
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
	// DemandBacklog is how many demand reports may wait for the planner to take them (default
	// DefaultDemandBacklog per pipeline); more are dropped and counted (the estimate then misses a frontend's
	// interval).
	DemandBacklog int
	// Metrics, if set, is where the planner registers its metrics (pkg/metrics).
	Metrics prometheus.Registerer
	Logger  *slog.Logger
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
	if c.DemandBacklog <= 0 {
		c.DemandBacklog = DefaultDemandBacklog * max(1, len(c.Pipelines))
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
	// replicas is Config.Replicas, or the default it stands for on the cluster Run found.
	replicas int

	complaints *ratelog.Limiter
	// droppedReports counts the demand reports the NATS client dropped over the subscription's pending limits.
	droppedReports bus.Drops

	mu         sync.Mutex
	specs      []*pipeline.Spec
	demand     map[string]*demand.Estimator       // per pipeline, under mu
	fanout     map[string]*demand.FanoutEstimator // per pipeline, under mu
	taskDemand map[string]*demand.TaskDemand      // per pipeline, under mu
	// counters folds the workers' heartbeats into what is new since each one's previous; under mu.
	counters *demand.Counters
	// latency holds the batch latencies the workers' heartbeats report; under mu.
	latency *latency.Board
	// systems are the pipelines' systems (the configured one, per spec), aligned with cfg.Pipelines.
	systems []control.System
	loops   []*control.Loop // per pipeline, aligned with specs; only Run's goroutine uses them
	// tuners are the pipelines' tuners (nil entries: no tuner), lent their loans, waiting the messages in each
	// variant's queue at the last look; aligned with specs, only Run's goroutine uses them.
	tuners  []*tuner.Tuner
	lent    []map[string]int
	waiting []map[string]float64
	// replannedAt is when each pipeline's last new allocation was published (Run's goroutine only).
	replannedAt []time.Time
	// lentShown is the loans per pipeline for the metrics, replaced (never changed in place) under mu.
	lentShown map[string]map[string]int
	live      *control.Liveness // under mu
	// Per live worker, under mu: the revision of its last registration seen, and the variant its heartbeat says it
	// cannot serve. expired holds the registrations of the workers found gone, still to delete (deleteExpired), by
	// the revision seen last; failingShown is how many live workers failed their assignment at the last count.
	revision     map[string]uint64
	failing      map[string]string
	expired      map[string]uint64
	failingShown int
	// reconnects is the connection's reconnect count when liveness last looked, demandReconnects when the demand
	// estimates last did; under mu.
	reconnects, demandReconnects uint64
	workersReady                 atomic.Bool // the worker watch delivered the registrations already in the bucket
	assign                       map[string]plan.Assignment
	// written is, per key the planner writes (spec, plan, assign), the value and revision of its last write;
	// tampered the keys someone else wrote since. Under mu.
	written  map[string]writtenValue
	tampered map[string]bool
	changed  chan struct{}
	// stepped says a demand report made a step of the estimate (demand.Estimator.Stepped): Run ticks at once.
	stepped chan struct{}
	// quietUntil suppresses the shortage warning while workers are still registering.
	quietUntil time.Time
	unplaced   int              // replicas without a worker at the last assignment
	metrics    *metrics.Planner // nil without Config.Metrics
	published  sync.Map         // pipeline -> the JSON of the last plan put, for the status endpoint
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
	p := &Planner{cfg: cfg, nc: nc, js: js, log: cfg.Logger, complaints: ratelog.New(cfg.Logger, 0, 0),
		live: control.NewLiveness(cfg.WorkerTimeout), demand: est, fanout: fan, taskDemand: tasks, systems: systems,
		counters: demand.NewCounters(), latency: latency.NewBoard(), assign: map[string]plan.Assignment{},
		revision: map[string]uint64{}, failing: map[string]string{}, expired: map[string]uint64{},
		written: map[string]writtenValue{}, tampered: map[string]bool{}, changed: make(chan struct{}, 1),
		stepped: make(chan struct{}, 1)}
	if cfg.Metrics != nil {
		p.metrics = metrics.NewPlanner(cfg.Metrics, p.metricsState)
	}
	return p, nil
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
	p.replicas = p.cfg.Replicas
	if p.replicas <= 0 {
		p.replicas = bus.DefaultReplicas(p.nc)
	}
	p.log.Info("state replicas", "replicas", p.replicas, "configured", p.cfg.Replicas,
		"cluster", p.nc.ConnectedClusterName(), "cluster_servers", bus.ClusterSize(p.nc))
	kv, err := bus.OpenBucket(ctx, p.js, p.cfg.Storage, p.replicas)
	if err != nil {
		return fmt.Errorf("planner: open KV bucket: %w", err)
	}
	p.kv = kv
	// Before any plan: a worker sets aside the messages it will not execute from the first one it takes.
	if _, err := bus.EnsureDeadLetterStream(ctx, p.js, p.cfg.Storage, p.replicas, p.cfg.DeadLetterMaxAge,
		p.cfg.DeadLetterMaxBytes); err != nil {
		return fmt.Errorf("planner: dead-letter stream: %w", err)
	}
	svc, err := p.addService()
	if err != nil {
		return fmt.Errorf("planner: micro service: %w", err)
	}
	defer svc.Stop()
	p.reconnects = p.nc.Stats().Reconnects
	p.demandReconnects = p.reconnects
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
	for range p.specs {
		var t *tuner.Tuner
		if p.cfg.Tunes() {
			t = tuner.New()
		}
		p.tuners, p.lent, p.waiting = append(p.tuners, t), append(p.lent, nil), append(p.waiting, nil)
		p.replannedAt = append(p.replannedAt, time.Time{})
	}
	reports, err := bus.Subscribe(p.nc, wire.DemandPrefix+"*", "", p.onDemand, p.demandLimits(), &p.droppedReports)
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
	var tuneTick <-chan time.Time // nil: no tuner
	if p.cfg.Tunes() {
		t := time.NewTicker(p.cfg.TuneEvery)
		defer t.Stop()
		tuneTick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tuneTick:
			if p.workersReady.Load() {
				p.tuneLook(ctx, now)
			}
			continue
		case <-p.changed:
		case <-tick.C:
		case <-p.stepped:
			// A step of the demand: planned for now, and the next tick a period from now.
			demandTick.Reset(estimateEvery)
			if now := time.Now(); p.workersReady.Load() {
				p.step(ctx, now, p.estimate(now))
			}
			continue
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
		p.deleteExpired(ctx)
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
	// profiles are the profiles blended with the latencies the live workers measured: see control.Observed.Profiles.
	profiles map[string][]pipeline.ProfilePoint
}

// estimate folds the reports since the last tick into each pipeline's estimates.
func (p *Planner) estimate(now time.Time) []estimates {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]estimates, len(p.specs))
	// The frontends' reports the bus could not carry while the planner was cut off were not missed by them.
	grace := false
	if r := p.nc.Stats().Reconnects; r != p.demandReconnects || !p.nc.IsConnected() {
		p.demandReconnects, grace = r, true
	}
	for i, spec := range p.specs {
		if grace {
			p.demand[spec.Name].Grace(now)
		}
		fe := p.fanout[spec.Name]
		fe.Tick()
		e := p.demand[spec.Name]
		out[i] = estimates{demand: e.Tick(now), window: e.Window(), unknown: !e.Known(), fanout: fe.Estimate(spec),
			samples: fe.Samples(), tasks: p.taskDemand[spec.Name].Tick(now, estimateEvery),
			profiles: latency.Blend(spec, p.latency.Measured(spec, now, p.cfg.WorkerTimeout))}
	}
	return out
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
	able, _ := p.workers(now)
	live := len(able)
	for i, spec := range p.specs {
		o := control.Observed{Demand: ests[i].demand, DemandWindow: ests[i].window, DemandUnknown: ests[i].unknown,
			Fanout: ests[i].fanout, FanoutSamples: ests[i].samples, TaskDemand: ests[i].tasks, Profiles: ests[i].profiles,
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
	if st.Replanned {
		p.replannedAt[i] = now
		p.retune(i, now)
	}
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
