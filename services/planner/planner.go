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
	"github.com/sleipnir-serving/sleipnir/pkg/core"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
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
	// Prices are the hourly prices of a server of each class (plan.ParsePrices): plans then minimise and report
	// their cost (docs/classes.md). A worker's class is in its heartbeat (wire.Registration.Class).
	Prices plan.Prices
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
	complainDivision     = "joint division failed; the shares in force (or an even split) stay"
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
	// beforeReport, set by tests only, runs before each demand report is taken (to hold the reports up).
	beforeReport atomic.Pointer[func()]
	// droppedReports counts the demand reports the NATS client dropped over the subscription's pending limits.
	droppedReports bus.Drops

	// core is the planning state of every pipeline (pkg/core): estimates, control loops, tuners, loans. Its inputs
	// are safe from any goroutine; its decisions are Run's goroutine's. Lock order: mu before the core's own lock
	// (the core calls nothing back).
	core *core.Cluster

	mu   sync.Mutex
	live *control.Liveness // under mu
	// Per live worker, under mu: the revision of its last registration seen, and the variant its heartbeat says it
	// cannot serve. expired holds the registrations of the workers found gone, still to delete (deleteExpired), by
	// the revision seen last; failingShown is how many live workers failed their assignment at the last count.
	revision     map[string]uint64
	failing      map[string]string
	class        map[string]string // each live worker's server class, from its heartbeat
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
	// planned is closed after the first step (Planned).
	planned     chan struct{}
	plannedOnce sync.Once
	// quietUntil suppresses the shortage warning while workers are still registering.
	quietUntil time.Time
	unplaced   int              // replicas without a worker at the last assignment
	metrics    *metrics.Planner // nil without Config.Metrics
	published  sync.Map         // pipeline -> the JSON of the last plan put, for the status endpoint
	streams    sync.Map         // pipeline -> its task stream's handle (taskQueues)
}

// New prepares a planner on a connection; Run serves.
func New(nc *nats.Conn, cfg Config) (*Planner, error) {
	cfg.setDefaults()
	if len(cfg.Pipelines) == 0 {
		return nil, errors.New("planner: no pipeline to serve")
	}
	priced := false
	for _, price := range cfg.Prices {
		priced = priced || price > 0
	}
	if err := cfg.Config.CheckCostCap(len(cfg.Pipelines), priced); err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	// The system's deadline policy is the published spec's: the workers read it there.
	specs := make([]*pipeline.Spec, len(cfg.Pipelines))
	systems := make([]control.System, len(cfg.Pipelines))
	for i, s := range cfg.Pipelines {
		ccfg := cfg.Config
		var check *sim.Checker // plans are checked by the simulator before they are published (Config.Check)
		if ccfg.Check != control.CheckNone {
			check = &sim.Checker{CommLatency: -1, Seed: 1, TuneEvery: ccfg.TuneEvery}
			ccfg.Checker = check
		}
		sys, err := control.ParseSystem(cfg.System, s, ccfg)
		if err != nil {
			return nil, fmt.Errorf("planner: %w", err)
		}
		if check != nil {
			check.Policy = sys.Policy
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
	c, err := core.New(cfg.Pipelines, systems, core.Config{Control: cfg.Config, DemandAlpha: cfg.DemandAlpha,
		DemandWarmup: cfg.DemandWarmup, MaxReportQPS: cfg.MaxReportQPS, LatencyMaxAge: cfg.WorkerTimeout})
	if err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	p := &Planner{cfg: cfg, nc: nc, js: js, log: cfg.Logger, complaints: ratelog.New(cfg.Logger, 0, 0),
		live: control.NewLiveness(cfg.WorkerTimeout), core: c, assign: map[string]plan.Assignment{},
		revision: map[string]uint64{}, failing: map[string]string{}, class: map[string]string{}, expired: map[string]uint64{},
		written: map[string]writtenValue{}, tampered: map[string]bool{}, changed: make(chan struct{}, 1),
		stepped: make(chan struct{}, 1), planned: make(chan struct{})}
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
	if err := p.untilReady(ctx, "the KV bucket and the dead-letter stream", p.openState); err != nil {
		return err
	}
	svc, err := p.addService()
	if err != nil {
		return fmt.Errorf("planner: micro service: %w", err)
	}
	defer svc.Stop()
	p.reconnects = p.nc.Stats().Reconnects
	p.demandReconnects = p.reconnects
	if err := p.beginPipelines(ctx); err != nil {
		return err
	}
	reports, err := bus.Subscribe(p.nc, wire.DemandPrefix+"*", "", p.onDemand, p.demandLimits(), &p.droppedReports)
	if err != nil {
		return err
	}
	defer reports.Unsubscribe()
	if err := p.loadAssignments(ctx); err != nil {
		return err
	}
	go bus.WatchKV(ctx, p.nc, p.kv, wire.WorkerKeys.Pattern(), p.onWorker, func() { p.workersReady.Store(true) })
	// What the planner writes, it keeps: a value someone else wrote is put back (see onWritten).
	for _, keys := range []wire.KeyKind{wire.SpecKeys, wire.PlanKeys, wire.AssignKeys} {
		go bus.WatchKV(ctx, p.nc, p.kv, keys.Pattern(), p.onWritten, nil)
	}
	// Workers register within a refresh period of the planner's start; a shortage before that is no news.
	p.quietUntil = time.Now().Add(p.cfg.WorkerTimeout)
	p.loop(ctx)
	return nil
}

// untilReady runs declare (which must be safe to run again) until it succeeds, again after each error that says JetStream is not ready yet (a cluster
// still electing its meta leader, a server whose JetStream is starting, an API request that timed out on a busy
// machine), 100 ms apart doubling to 2 s, until ctx is done; other errors end it. A planner started beside the NATS
// servers, as compose starts them, exited on its first timeout (deploy TestImageRunsAsComposeStartsIt under load).
func (p *Planner) untilReady(ctx context.Context, what string, declare func(context.Context) error) error {
	wait := 100 * time.Millisecond
	for {
		err := declare(ctx)
		if err == nil || ctx.Err() != nil || !bus.NotReady(err) {
			return err
		}
		p.log.Warn("JetStream not ready; declaring again", "what", what, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// openState declares the state the planner alone declares, replicated on the cluster it found: the KV bucket and
// the dead-letter stream.
func (p *Planner) openState(ctx context.Context) error {
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
	return nil
}

// beginPipelines gives each pipeline its first plan, and starts its control loop from it.
func (p *Planner) beginPipelines(ctx context.Context) error {
	for _, cp := range p.core.Pipelines() {
		// A restarted planner resumes the plan it (or its predecessor) left in the bucket: the workers serve it,
		// and the demand it was sized for is a better estimate than the nothing a new planner knows.
		if cp.System.Allocator != nil { // nil: static
			if pl := p.storedPlan(ctx, cp.Spec); pl != nil {
				if err := p.resume(ctx, cp.Spec, pl); err != nil {
					return err
				}
				if err := p.core.Begin(cp, pl, true, time.Now()); err != nil {
					return err
				}
				continue
			}
		}
		pl, err := p.publish(ctx, cp.Spec)
		if err != nil {
			return err
		}
		if err := p.core.Begin(cp, pl, false, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// loop steps the plans each core.TickEvery (at once after a step of the demand), looks with the tuners, and
// assigns the workers when they change, until ctx is done.
func (p *Planner) loop(ctx context.Context) {
	tick := time.NewTicker(p.cfg.WorkerTimeout / 5)
	defer tick.Stop()
	demandTick := time.NewTicker(core.TickEvery)
	defer demandTick.Stop()
	var tuneTick <-chan time.Time // nil: no tuner
	if p.core.Tunes() {
		t := time.NewTicker(p.core.TuneEvery())
		defer t.Stop()
		tuneTick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tuneTick:
			if p.workersReady.Load() {
				p.tuneLook(ctx, now)
			}
			continue
		case <-p.changed:
		case <-tick.C:
		case <-p.stepped:
			// A step of the demand: planned for now, and the next tick a period from now.
			demandTick.Reset(core.TickEvery)
			if now := time.Now(); p.workersReady.Load() {
				p.step(ctx, now)
			}
			continue
		case now := <-demandTick.C:
			// Until the registrations already in the bucket are read, the live workers are not known.
			if p.workersReady.Load() {
				p.step(ctx, now)
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

// step runs the core's tick (pkg/core: the estimates and each pipeline's control loop), publishes what it decided,
// reassigns the workers after a new allocation, moving as few as possible, and then moves what waits at variants
// the plans in force retired (rehome).
func (p *Planner) step(ctx context.Context, now time.Time) {
	// The frontends' reports the bus could not carry while the planner was cut off were not missed by them.
	p.mu.Lock()
	if r := p.nc.Stats().Reconnects; r != p.demandReconnects || !p.nc.IsConnected() {
		p.demandReconnects = r
		p.core.Grace(now)
	}
	p.mu.Unlock()
	able, _ := p.workers(now)
	cluster, _ := p.onCluster(able)
	for _, d := range p.core.Tick(now, cluster) {
		p.publishStep(ctx, now, d, cluster)
		p.rehome(ctx, d.Pipeline.Spec, d.Pipeline.Current(), nil, nil)
	}
	if ms, ok := p.core.DivisionSolved(); ok {
		p.metrics.DivisionSolve(ms)
		p.log.Log(ctx, solveLogLevel(ms), "workers divided between the pipelines", "solve_ms", ms)
	}
	if err := p.core.DivisionErr(); err != nil {
		p.complaints.Warn(complainDivision, "err", err)
	}
	p.plannedOnce.Do(func() { close(p.planned) })
}

// Planned is closed once the planner has stepped the plans on the live workers (its first step, a second after it
// began): until then, the plans in force are the first ones, made before any worker was known (for several
// pipelines, their specs' static allocations, which together need not fit the workers: pkg/core Begin).
func (p *Planner) Planned() <-chan struct{} { return p.planned }

// publishStep publishes what the core decided for one pipeline at a tick.
func (p *Planner) publishStep(ctx context.Context, now time.Time, d core.Decision, able plan.Cluster) {
	spec, o := d.Pipeline.Spec, d.Observed
	if d.Err != nil {
		msg := "allocation failed; the current plan stays"
		if d.Plan != nil && d.Plan.HostsNothing() {
			msg = "allocation failed; the pipeline gets a plan that hosts nothing (its requests refused at once)"
		}
		p.log.Warn(msg, "pipeline", spec.Name, "demand_qps", round(o.Demand), "servers", o.Servers, "err", d.Err)
	}
	if s := d.Solved; s != nil {
		p.metrics.Solve(spec.Name, s.Outcome, s.Ms)
		if !d.Replanned { // a new plan's solve is logged with the plan, once published
			p.log.Log(ctx, solveLogLevel(s.Ms), "solved; the allocation in force stays", "pipeline", spec.Name,
				"trigger", s.Trigger, "outcome", s.Outcome, "solve_ms", s.Ms, "demand_qps", round(o.Demand))
		}
	}
	pl := d.Plan
	if pl == nil {
		return
	}
	if d.Replanned {
		if err := p.ensureConsumers(ctx, spec, pl); err != nil {
			p.log.Warn("creating consumers for a new plan failed; will retry", "pipeline", spec.Name, "err", err)
			return
		}
	}
	if err := p.putPlan(ctx, pl); err != nil {
		p.log.Warn("publishing a plan failed; will retry", "pipeline", spec.Name, "err", err)
		return
	}
	p.core.Published(d, now, able)
	if !d.Replanned {
		p.log.Debug("routing published", "pipeline", spec.Name, "demand_qps", round(o.Demand))
		return
	}
	a := pl.Allocation
	p.log.Info("plan published", "pipeline", spec.Name, "epoch", pl.Epoch, "mode", pl.Mode, "trigger", d.Trigger,
		"estimate_qps", round(a.Estimate()), "demand_qps", round(a.DemandQPS), "active_servers", a.ActiveServers,
		"servers", o.OnCluster().String(), "arrival_dispersion", round(o.Traffic.Dispersion()),
		"cost_per_hour", round(a.CostPerHour),
		"system_accuracy", round(a.SystemAccuracy), "optimal", a.Optimal, "gap", round(a.Gap),
		"solve_ms", a.SolveMs)
	if c := a.Check; c != nil {
		p.log.Info("plan checked by simulation", "pipeline", spec.Name, "epoch", pl.Epoch,
			"predicted_violations", round(c.ViolationRatio), "candidates", c.Candidates, "changed", c.Changed,
			"poisson", c.Poisson)
	}
	if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("assigning workers failed; will retry", "err", err)
	}
}

// solveLogLevel is the level a solve that publishes no plan (a control loop's, or the division's) is logged at: info
// from 100 ms, debug below. In a process shared with the data plane (sleipnir up) a long solve's CPU can show as a
// burst of late requests, and its line dates it.
func solveLogLevel(ms float64) slog.Level {
	if ms >= 100 {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }
