// Package planner is the planner service: it publishes each pipeline's spec and plan to the KV bucket, creates the
// streams and consumers the plan needs, and assigns the live workers to the plan's variant replicas, changing as few
// assignments as possible when workers come and go.
package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
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
	// RouteEvery is the longest the routing tables go without being recomputed from the demand estimate (default
	// 10 s); they are recomputed at once when the estimate moves by more than RouteThreshold (default 10%).
	RouteEvery     time.Duration
	RouteThreshold float64
	// RouteUtilization is the share of each variant's capacity the routing fills before overflowing to the next
	// most accurate variant (default 0.85): a variant fed at its full service rate has an unbounded queue.
	RouteUtilization float64
	// DemandAlpha is the weight of the newest demand report in the moving average (default 0.3).
	DemandAlpha float64
	// Allocator says where the plans come from: AllocatorMILP (the default) solves the allocation MILP for the
	// demand estimate and the live workers; AllocatorStatic publishes the spec's allocation section once.
	Allocator string
	// ReplanEvery is how often the MILP is solved again (default 10 s); it is solved at once when the demand
	// estimate moves by more than ReplanThreshold (default 20%) or the number of live workers changes. A due
	// re-plan whose inputs have barely changed (demand within 5%, same workers, same multiplicative factors) is
	// skipped: it would find the same plan, or move workers for nothing.
	ReplanEvery     time.Duration
	ReplanThreshold float64
	// SolveTimeLimit bounds each MILP solve (default 1 s); a solve stopped by it publishes its best plan with its
	// gap.
	SolveTimeLimit time.Duration
	// MinDemandQPS is the least demand planned for (default 1), so that every task has a replica before the
	// first request arrives.
	MinDemandQPS float64
	Logger       *slog.Logger
}

// Allocators.
const (
	AllocatorMILP   = "milp"
	AllocatorStatic = "static"
)

func (c *Config) setDefaults() {
	if c.WorkerTimeout == 0 {
		c.WorkerTimeout = 5 * time.Second
	}
	if c.RouteEvery == 0 {
		c.RouteEvery = 10 * time.Second
	}
	if c.RouteUtilization == 0 {
		c.RouteUtilization = 0.85
	}
	if c.RouteThreshold == 0 {
		c.RouteThreshold = 0.1
	}
	if c.Allocator == "" {
		c.Allocator = AllocatorMILP
	}
	if c.ReplanEvery == 0 {
		c.ReplanEvery = 10 * time.Second
	}
	if c.ReplanThreshold == 0 {
		c.ReplanThreshold = 0.2
	}
	if c.SolveTimeLimit == 0 {
		c.SolveTimeLimit = time.Second
	}
	if c.MinDemandQPS == 0 {
		c.MinDemandQPS = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("service", "planner")
}

// Planner keeps the plans in the KV bucket and the workers assigned.
type Planner struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	log *slog.Logger

	mu     sync.Mutex
	specs  []*pipeline.Spec
	plans  []*plan.Plan
	demand map[string]*demand.Estimator       // per pipeline, under mu
	fanout map[string]*demand.FanoutEstimator // per pipeline, under mu
	// observed is each worker's last heartbeat measurements, to fold in only what is new; under mu.
	observed map[string]wire.Registration
	routed   map[string]routedAt  // the estimate and time of each pipeline's current routing
	planned  map[string]plannedAt // the inputs and time of each pipeline's current MILP plan
	seen     map[string]time.Time // worker -> last registration refresh
	assign   map[string]plan.Assignment
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
	if cfg.Allocator != AllocatorMILP && cfg.Allocator != AllocatorStatic {
		return nil, fmt.Errorf("planner: allocator %q: want %s or %s", cfg.Allocator, AllocatorMILP, AllocatorStatic)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	est := map[string]*demand.Estimator{}
	fan := map[string]*demand.FanoutEstimator{}
	for _, s := range cfg.Pipelines {
		est[s.Name] = demand.New(cfg.DemandAlpha, 0)
		fan[s.Name] = demand.NewFanoutEstimator(cfg.DemandAlpha, 0)
	}
	return &Planner{cfg: cfg, nc: nc, js: js, log: cfg.Logger, seen: map[string]time.Time{}, demand: est,
		fanout: fan, observed: map[string]wire.Registration{}, routed: map[string]routedAt{}, planned: map[string]plannedAt{},
		assign: map[string]plan.Assignment{}, changed: make(chan struct{}, 1)}, nil
}

// Run publishes the plans and assigns workers until ctx is done.
func (p *Planner) Run(ctx context.Context) error {
	kv, err := bus.OpenBucket(ctx, p.js, p.cfg.Storage)
	if err != nil {
		return fmt.Errorf("planner: open KV bucket: %w", err)
	}
	p.kv = kv
	for _, spec := range p.cfg.Pipelines {
		pl, err := p.publish(ctx, spec)
		if err != nil {
			return err
		}
		p.specs = append(p.specs, spec)
		p.plans = append(p.plans, pl)
	}
	reports, err := p.nc.Subscribe(wire.DemandPrefix+"*", p.onDemand)
	if err != nil {
		return err
	}
	defer reports.Unsubscribe()
	if err := p.loadAssignments(ctx); err != nil {
		return err
	}
	go bus.WatchKV(ctx, p.nc, kv, wire.WorkerKeys, p.onWorker, nil)
	// Workers register within a refresh period of the planner's start; a shortage before that is no news.
	p.quietUntil = time.Now().Add(p.cfg.WorkerTimeout)

	tick := time.NewTicker(p.cfg.WorkerTimeout / 5)
	defer tick.Stop()
	demandTick := time.NewTicker(time.Second)
	defer demandTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.changed:
		case <-tick.C:
		case now := <-demandTick.C:
			est := p.estimate(now)
			if p.cfg.Allocator == AllocatorMILP {
				p.replan(ctx, now, est)
			}
			p.reroute(ctx, now, est)
			continue
		}
		if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("assigning workers failed; will retry", "err", err)
		}
	}
}

type routedAt struct {
	demand float64
	at     time.Time
}

// replanMinChange is how far the demand must have moved for a due re-plan to be solved: the estimate of a steady
// Poisson load wanders by a few percent, and each new plan may move workers.
const replanMinChange = 0.05

type plannedAt struct {
	demand  float64
	servers int
	fanout  map[string]pipeline.Fanout
	at      time.Time
}

// estimates are a pipeline's demand and multiplicative factors as of the latest tick.
type estimates struct {
	demand float64
	fanout map[string]pipeline.Fanout
}

// estimate folds the reports since the last tick into each pipeline's estimates.
func (p *Planner) estimate(now time.Time) []estimates {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]estimates, len(p.specs))
	for i, spec := range p.specs {
		fe := p.fanout[spec.Name]
		fe.Tick()
		out[i] = estimates{demand: p.demand[spec.Name].Tick(now), fanout: fe.Estimate(spec)}
	}
	return out
}

// liveWorkers are the workers whose registration is fresh, in name order.
func (p *Planner) liveWorkers(now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var live []string
	for id, t := range p.seen {
		if now.Sub(t) <= p.cfg.WorkerTimeout {
			live = append(live, id)
		}
	}
	sort.Strings(live)
	return live
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

// replan solves the allocation MILP of each pipeline whose demand estimate moved by more than ReplanThreshold,
// whose share of the live workers changed, or whose last plan is ReplanEvery old, and publishes the new plan
// (with its routing) under a new epoch; the workers are then reassigned, moving as few as possible.
func (p *Planner) replan(ctx context.Context, now time.Time, ests []estimates) {
	live := len(p.liveWorkers(now))
	for i, spec := range p.specs {
		servers := p.serversFor(i, live)
		if servers == 0 {
			continue // no worker yet (or none left): the current plan stays until one registers
		}
		est, fan := ests[i].demand, ests[i].fanout
		p.mu.Lock()
		last, ok := p.planned[spec.Name]
		p.mu.Unlock()
		target := max(est, p.cfg.MinDemandQPS)
		due := now.Sub(last.at) >= p.cfg.ReplanEvery
		if ok && servers == last.servers && !demand.Moved(last.demand, target, p.cfg.ReplanThreshold) {
			if !due {
				continue
			}
			if !demand.Moved(last.demand, target, replanMinChange) &&
				!demand.FanoutMoved(last.fanout, fan, p.cfg.RouteThreshold) {
				p.mu.Lock()
				last.at = now
				p.planned[spec.Name] = last
				p.mu.Unlock()
				continue
			}
		}
		res, err := allocate.Solve(allocate.Input{Spec: spec, Demand: target, Servers: servers, Fanout: fan,
			Utilization: p.cfg.RouteUtilization}, allocate.Options{TimeLimit: p.cfg.SolveTimeLimit})
		if err != nil {
			p.log.Warn("allocation failed; the current plan stays", "pipeline", spec.Name, "demand_qps", target,
				"servers", servers, "err", err)
			p.notePlanned(spec.Name, target, servers, fan, now)
			continue
		}
		if len(res.Variants) == 0 {
			p.log.Warn("the workers cannot serve the pipeline at all; the current plan stays", "pipeline", spec.Name,
				"demand_qps", target, "servers", servers, "mode", res.Mode)
			p.notePlanned(spec.Name, target, servers, fan, now)
			continue
		}
		pl := res.Plan(spec.Name, p.plans[i].Epoch+1)
		pl.Fanout = fan
		pl.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: pl, Demand: est, Fanout: fan,
			Utilization: p.cfg.RouteUtilization})
		if err := p.ensureConsumers(ctx, spec, pl); err != nil {
			p.log.Warn("creating consumers for a new plan failed; will retry", "pipeline", spec.Name, "err", err)
			continue
		}
		if err := p.putPlan(ctx, pl); err != nil {
			p.log.Warn("publishing a new plan failed; will retry", "pipeline", spec.Name, "err", err)
			continue
		}
		p.plans[i] = pl
		p.notePlanned(spec.Name, target, servers, fan, now)
		p.mu.Lock()
		p.routed[spec.Name] = routedAt{demand: est, at: now}
		p.mu.Unlock()
		p.log.Info("plan published", "pipeline", spec.Name, "epoch", pl.Epoch, "mode", pl.Mode,
			"demand_qps", round(target), "active_servers", res.ServersUsed, "servers", servers,
			"system_accuracy", round(res.SystemAccuracy), "optimal", res.Optimal, "gap", round(res.Gap),
			"solve_ms", res.SolveMs)
		if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("assigning workers failed; will retry", "err", err)
		}
	}
}

func (p *Planner) notePlanned(name string, demand float64, servers int, fan map[string]pipeline.Fanout, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.planned[name] = plannedAt{demand: demand, servers: servers, fanout: fan, at: now}
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

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
	var r wire.DemandReport
	if err := msgpack.Unmarshal(m.Data, &r); err != nil {
		p.log.Warn("discarding undecodable demand report", "subject", m.Subject, "err", err)
		return
	}
	name := strings.TrimPrefix(m.Subject, wire.DemandPrefix)
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.demand[name]; e != nil {
		e.Observe(r.Frontend, r.Count, time.Duration(r.IntervalMs*float64(time.Millisecond)), time.Now())
	}
}

// reroute folds the latest demand reports into each pipeline's estimate and publishes new routing tables when the
// estimate has moved, or has not been routed for RouteEvery. The allocation, its epoch and the assignments stay.
func (p *Planner) reroute(ctx context.Context, now time.Time, ests []estimates) {
	for i, spec := range p.specs {
		est, fan := ests[i].demand, ests[i].fanout
		p.mu.Lock()
		last := p.routed[spec.Name]
		p.mu.Unlock()
		if !demand.Moved(last.demand, est, p.cfg.RouteThreshold) && now.Sub(last.at) < p.cfg.RouteEvery &&
			!demand.FanoutMoved(p.plans[i].Fanout, fan, p.cfg.RouteThreshold) {
			continue
		}
		pl := *p.plans[i]
		pl.Fanout = fan
		pl.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: &pl, Demand: est, Fanout: fan,
			Utilization: p.cfg.RouteUtilization})
		if err := p.putPlan(ctx, &pl); err != nil {
			p.log.Warn("publishing routing failed; will retry", "pipeline", spec.Name, "err", err)
			continue
		}
		p.plans[i] = &pl
		p.mu.Lock()
		p.routed[spec.Name] = routedAt{demand: est, at: now}
		p.mu.Unlock()
		p.log.Debug("routing published", "pipeline", spec.Name, "demand_qps", est)
	}
}

func (p *Planner) putPlan(ctx context.Context, pl *plan.Plan) error {
	data, err := json.Marshal(pl)
	if err != nil {
		return err
	}
	_, err = p.kv.Put(ctx, wire.PlanKey(pl.Pipeline), data)
	return err
}

// publish writes a pipeline's spec and static plan, after the stream and consumers the plan needs. Until demand is
// reported, the routing assumes none: every table sends to the most accurate variant.
func (p *Planner) publish(ctx context.Context, spec *pipeline.Spec) (*plan.Plan, error) {
	pl, err := plan.Static(spec)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	pl.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: pl})
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
	if _, err := p.kv.Put(ctx, wire.SpecKey(spec.Name), specJSON); err != nil {
		return nil, fmt.Errorf("pipeline %s: publish spec: %w", spec.Name, err)
	}
	// The epoch continues from the plan already in the bucket, so workers can tell a new plan from an old one
	// across planner restarts.
	if e, err := p.kv.Get(ctx, wire.PlanKey(spec.Name)); err == nil {
		var old plan.Plan
		if json.Unmarshal(e.Value(), &old) == nil {
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

// loadAssignments reads the assignments already in the bucket, so a restarted planner moves no worker needlessly.
func (p *Planner) loadAssignments(ctx context.Context) error {
	lister, err := p.kv.ListKeysFiltered(ctx, "assign.*")
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		e, err := p.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var a plan.Assignment
		if json.Unmarshal(e.Value(), &a) == nil {
			p.assign[strings.TrimPrefix(key, "assign.")] = a
		}
	}
	return nil
}

func (p *Planner) onWorker(e jetstream.KeyValueEntry) {
	id := strings.TrimPrefix(e.Key(), "worker.")
	p.mu.Lock()
	_, known := p.seen[id]
	if e.Operation() == jetstream.KeyValuePut {
		p.seen[id] = e.Created()
		var reg wire.Registration
		if err := json.Unmarshal(e.Value(), &reg); err == nil {
			p.foldObservations(id, reg)
		}
	} else {
		delete(p.seen, id)
		delete(p.observed, id)
	}
	p.mu.Unlock()
	if known != (e.Operation() == jetstream.KeyValuePut) {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// foldObservations adds what a worker measured since its previous heartbeat to the multiplicative-factor estimates.
// Called with mu held.
func (p *Planner) foldObservations(id string, reg wire.Registration) {
	prev, ok := p.observed[id]
	if !ok || !prev.Started.Equal(reg.Started) {
		prev = wire.Registration{} // a new or restarted worker: its counters start from zero
	}
	p.observed[id] = reg
	for key, cur := range reg.Observed {
		name, hop, found := strings.Cut(key, ":")
		fe := p.fanout[name]
		if !found || fe == nil {
			continue
		}
		old := prev.Observed[key]
		if cur.Items < old.Items {
			old = wire.Observed{}
		}
		delta := wire.FanoutCounts{Items: cur.Items - old.Items, Children: map[string]uint64{}}
		for c, n := range cur.Children {
			if n >= old.Children[c] {
				delta.Children[c] = n - old.Children[c]
			}
		}
		fe.Observe(hop, delta)
	}
}

// reassign recomputes the assignments for the live workers and writes the ones that changed.
func (p *Planner) reassign(ctx context.Context) error {
	live := p.liveWorkers(time.Now())
	p.mu.Lock()
	prev := p.assign
	p.mu.Unlock()

	next, unplaced := plan.Assign(p.plans, live, prev)
	for id, a := range next {
		if old, ok := prev[id]; ok && old == a {
			continue
		}
		data, _ := json.Marshal(a)
		if _, err := p.kv.Put(ctx, wire.AssignKey(id), data); err != nil {
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
			if err := p.kv.Delete(ctx, wire.AssignKey(id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
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
