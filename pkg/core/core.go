// Package core is the planning core: for every pipeline a cluster serves, the demand, multiplicative-factor and
// per-task estimators, the measured latencies, the control loop, the tuner and its loans, the worker assignment and
// the decisions to move the queues of retired variants. Its inputs are the frontends' demand reports, the workers'
// heartbeats, the queue depths and the time; its outputs are the plans to publish, the assignments, the loans and
// the queues to move. Pure: the planner service (services/planner) is NATS and KV input and output around one
// Cluster, and the simulator (pkg/sim) drives the same Cluster in simulated time, so the sequence is written once.
//
// Concurrency: the inputs (Report, Heartbeat, Forget, Grace) and the read-outs (Demand, Loans) may come from any
// goroutine; the decisions (Begin, Tick, Published, Look, Assign) from one goroutine only, the planner's loop. The
// Cluster's lock guards the estimators and is never held across a solve, so reports are not held up by one.
package core

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/tuner"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config tunes a Cluster. Zero values are defaults.
type Config struct {
	// Control tunes each pipeline's control loop and the tuner (pkg/control).
	Control control.Config
	// DemandAlpha is the weight of the newest second in the demand, multiplicative-factor and message-size
	// averages (default 0.3).
	DemandAlpha float64
	// DemandWarmup is how long demand reports are gathered, after none were coming in, before their total moves
	// the estimate (demand.Estimator.Warmup; the planner's frontends report out of step, the simulator's in step).
	DemandWarmup time.Duration
	// MaxReportQPS is the largest rate one demand report may claim (0: no bound).
	MaxReportQPS float64
	// LatencyMaxAge is how long a worker's latency report counts without a newer one (default 5 s, the planner's
	// worker timeout).
	LatencyMaxAge time.Duration
}

// RehomeAfterPlan is how long after a new plan every look of the tuner also moves what waits at the variants the
// plan retired: upstream workers send there until they have read the plan, and each second's move would leave
// those messages waiting up to a second.
const RehomeAfterPlan = 2 * time.Second

// Cluster is the planning state of the pipelines one planner serves on one set of workers.
type Cluster struct {
	cfg   Config
	pipes []*Pipeline
	named map[string]*Pipeline
	// byPriority are the pipelines, the highest class first (in the order given within a class).
	byPriority []*Pipeline
	// sharing is how the pipelines share the workers (control.SharingJoint or SharingEven), joint the allocator
	// of the joint division; division is the division in force (divide.go).
	sharing  string
	joint    control.JointMILP
	division division

	mu sync.Mutex // guards what the inputs change: the estimators below and each Pipeline's estimators
	// counters folds the workers' heartbeats into what is new since each one's previous; latency holds the batch
	// latencies they report; messages how many items their task messages hold.
	counters *demand.Counters
	latency  *latency.Board
	messages *demand.MessageSize
	// lentShown are the loans per pipeline, replaced (never changed in place) after each change.
	lentShown map[string]map[string]int
}

// Pipeline is one pipeline's part of the core.
type Pipeline struct {
	Spec   *pipeline.Spec
	System control.System
	index  int // in Cluster.pipes

	// Under Cluster.mu:
	demand  *demand.Estimator
	fanout  *demand.FanoutEstimator
	escal   *demand.EscalationEstimator // the cascades' first variants' escalation rates
	tasks   *demand.TaskDemand
	traffic *demand.Traffic // the frontends' gaps and the workers' sub-request counts, for the plan check

	// The decisions' goroutine only:
	loop        *control.Loop
	tuner       *tuner.Tuner // nil: no tuner
	lent        map[string]int
	queues      map[string]float64 // messages waiting or in service per "task/variant" at the last look
	replannedAt time.Time          // when the last new allocation was published
	cut         map[string]bool    // the "task/variant"s whose replicas (loans included) it cut (Excess)
	// scale is the budget scale of scaleOf, the plan its tuner last looked at (plans are replaced, not changed)
	scale   float64
	scaleOf *plan.Plan
	byClass map[string]int // scaleOf's servers per class (plan.ServersByClass), read, never written
	// variants is the buffer of its tuner's input (tuner.ObserveScaled), reused look after look: the tuner keeps
	// none of it
	variants []tuner.Variant
	// keys are the key strings of scaleOf's variants, in its order, as its tuner looks at them: built once a
	// plan, not at every look (they were a fifth of the objects the simulator allocated)
	keys []lookKeys
}

// New makes the core of specs, each planned by its system (the same index). Each pipeline starts with Begin.
func New(specs []*pipeline.Spec, systems []control.System, cfg Config) (*Cluster, error) {
	if len(specs) == 0 || len(specs) != len(systems) {
		return nil, fmt.Errorf("core: %d pipelines and %d systems", len(specs), len(systems))
	}
	cfg.Control.SetDefaults()
	if cfg.LatencyMaxAge == 0 {
		cfg.LatencyMaxAge = 5 * time.Second
	}
	c := &Cluster{cfg: cfg, named: map[string]*Pipeline{}, counters: demand.NewCounters(),
		latency: latency.NewBoard(), messages: demand.NewMessageSize(cfg.DemandAlpha)}
	for i, spec := range specs {
		if c.named[spec.Name] != nil {
			return nil, fmt.Errorf("core: pipeline %q given twice", spec.Name)
		}
		e := cfg.Control.DemandEstimator(cfg.DemandAlpha)
		e.Warmup, e.MaxRate = cfg.DemandWarmup, cfg.MaxReportQPS
		// Tasks below the root: the root's demand is the frontends' reports.
		var below []string
		for _, t := range spec.Tasks {
			if t.Name != spec.Root().Name {
				below = append(below, t.Name)
			}
		}
		p := &Pipeline{Spec: spec, System: systems[i], index: i, demand: e, traffic: demand.NewTraffic(),
			fanout: demand.NewFanoutEstimator(cfg.DemandAlpha, 0), escal: demand.NewEscalationEstimator(cfg.DemandAlpha, 0),
			tasks: demand.NewTaskDemand(below, func() *demand.Estimator {
				return cfg.Control.DemandEstimator(cfg.DemandAlpha)
			})}
		if cfg.Control.Tunes() && !systems[i].PlansOnce {
			p.tuner = tuner.New()
		}
		c.pipes = append(c.pipes, p)
		c.named[spec.Name] = p
	}
	if err := c.chooseSharing(systems); err != nil {
		return nil, err
	}
	c.byPriority = slices.Clone(c.pipes)
	slices.SortStableFunc(c.byPriority, func(a, b *Pipeline) int { return b.Spec.Priority - a.Spec.Priority })
	return c, nil
}

// divisionNodes bounds the nodes of each branch-and-bound of a joint division's solve (the joint MILP's, or each
// search of its accuracy step decomposed over the servers): a proof of the last tenths of a point may take
// thousands (seconds: docs/measurements.md), while the division only needs each pipeline's share of the servers
// (each loop then solves its own plan exactly within it); a node bound rather than a time limit keeps the
// simulator's runs the same on any machine.
const divisionNodes = 300

// chooseSharing settles how the pipelines share the workers: Control.Sharing, or by default the joint division when
// every pipeline is planned by the allocation MILP (the baselines split evenly).
func (c *Cluster) chooseSharing(systems []control.System) error {
	var milps []control.MILP
	for _, s := range systems {
		alloc := s.Allocator
		if ck, ok := alloc.(control.Checked); ok { // the division splits; each loop's plan is checked
			alloc = ck.Inner
		}
		if m, ok := alloc.(control.MILP); ok {
			milps = append(milps, m)
		}
	}
	c.sharing = c.cfg.Control.Sharing
	switch {
	case c.sharing == "" && len(milps) == len(systems):
		c.sharing = control.SharingJoint
	case c.sharing == "":
		c.sharing = control.SharingEven
	case c.sharing == control.SharingJoint && len(milps) < len(systems):
		return fmt.Errorf("core: joint sharing needs every pipeline planned by the allocation MILP (loki)")
	}
	if len(milps) > 0 {
		c.joint = control.JointMILP{MILP: milps[0], MaxNodes: divisionNodes}
	}
	return nil
}

// Sharing is how the pipelines share the workers (control.SharingJoint or SharingEven).
func (c *Cluster) Sharing() string { return c.sharing }

// Pipelines are the pipelines, in the order given to New.
func (c *Cluster) Pipelines() []*Pipeline { return c.pipes }

// Pipeline is the named pipeline; nil when the cluster does not serve it.
func (c *Cluster) Pipeline(name string) *Pipeline { return c.named[name] }

// ErrStarted says Begin was called twice for a pipeline.
var ErrStarted = errors.New("core: pipeline already started")

// Begin starts p's control loop from the plan in force: the first plan (control.FirstPlan) published by the
// caller, or, resumed, a plan an earlier planner left, whose demand and multiplicative factors seed the estimates
// (it is not solved again until they move: control.Resume).
//
// Pipelines that share the workers by the joint division start, fresh, from no demand rather than an unknown one:
// their first plans are their specs' static allocations, each written for a cluster of its own, which together need
// not fit (traffic's 20 replicas beside ocr's 2 on 4 workers: traffic's requests went to its detector's replicas,
// its other tasks had none, and they were answered late). From no demand, the first tick divides the workers: every
// pipeline hosted minimally where there is room (hostShed), the others given no server, their requests refused at
// once and reported as demand.
func (c *Cluster) Begin(p *Pipeline, current *plan.Plan, resumed bool, now time.Time) error {
	if p.loop != nil {
		return ErrStarted
	}
	if resumed {
		c.seed(p, current)
	} else if len(c.pipes) > 1 && c.sharing == control.SharingJoint {
		c.mu.Lock()
		p.demand.Seed(0)
		c.mu.Unlock()
	}
	if !resumed || p.System.Allocator == nil {
		p.loop = control.New(p.Spec, c.cfg.Control, p.System.Allocator, current)
		return nil
	}
	p.loop = control.Resume(p.Spec, c.cfg.Control, p.System.Allocator, current, now)
	return nil
}

// Restart starts p's control loop again from current, as Begin resumed: the plan check runs a plan from idle
// queues with the demand it was made for.
func (c *Cluster) Restart(p *Pipeline, current *plan.Plan, now time.Time) error {
	p.loop = nil
	return c.Begin(p, current, true, now)
}

// seed starts p's demand and multiplicative-factor estimates from what plan current was made for.
func (c *Cluster) seed(p *Pipeline, current *plan.Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := current.Allocation; a != nil {
		p.demand.Seed(a.Estimate())
	}
	for key, f := range current.Fanout { // validated against the spec by the caller
		k, _ := wire.ParseVariantKey(key)
		p.fanout.Seed(key, f, p.Spec.Task(k.Task).Children)
	}
}

// Current is the plan in force for p (the last one published).
func (p *Pipeline) Current() *plan.Plan { return p.loop.Current() }

// Demand is the demand estimate per pipeline.
func (c *Cluster) Demand() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]float64, len(c.pipes))
	for _, p := range c.pipes {
		out[p.Spec.Name] = p.demand.Estimate()
	}
	return out
}

// Loans are the tuner's loans per pipeline as of the last change (not to be changed by the caller).
func (c *Cluster) Loans() map[string]map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lentShown
}

// showLoans makes the loans readable by Loans.
func (c *Cluster) showLoans() {
	shown := make(map[string]map[string]int, len(c.pipes))
	for _, p := range c.pipes {
		shown[p.Spec.Name] = p.lent
	}
	c.mu.Lock()
	c.lentShown = shown
	c.mu.Unlock()
}
