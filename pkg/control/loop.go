package control

import (
	"errors"
	"maps"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Step is what the loop decided at one tick.
type Step struct {
	// Plan is the plan to publish; nil when the current one stands.
	Plan *plan.Plan
	// Replanned says Plan has a new allocation (a new epoch: workers are reassigned); otherwise only its routing
	// changed.
	Replanned bool
	// Trigger says why a new allocation was solved for (one of the Trigger* names), for the planner's log: an
	// operator reading why workers moved needs the cause, not only the epoch.
	Trigger string
	// Err says a re-plan failed: the current allocation stays, and is not solved again until its inputs move or
	// ReplanEvery passes. Plan may still carry new routing, or, when the servers cannot host the pipeline at all and
	// the current plan does not fit them, be a plan that hosts nothing.
	Err error
	// Solved is the allocation solve this step ran and what became of its plan; nil when it ran none (or it failed:
	// Err). A solve whose plan is not taken still took its CPU, which in a process shared with the data plane is
	// time the requests wait: the planner logs and counts every solve, not only those that publish.
	Solved *Solve
}

// Solve is one allocation solve of a step.
type Solve struct {
	Trigger string  // why it ran (Trigger*)
	Ms      float64 // the allocator's time, both solves' when the plan was sized with headroom
	Outcome string  // Solve*: what became of its plan
}

// What became of a solve's plan (Solve.Outcome).
const (
	SolveNewPlan  = "new_plan"  // a new allocation: Step.Replanned
	SolveSame     = "same"      // the allocation in force again
	SolveNotTaken = "not_taken" // a different allocation not worth its swaps (worthSwapping)
)

// Loop is one pipeline's control loop. Not safe for concurrent use.
type Loop struct {
	spec    *pipeline.Spec
	cfg     Config
	alloc   Allocator // nil: the allocation never changes, only the routing
	current *plan.Plan
	planned plannedAt
	routed  routedAt
}

type plannedAt struct {
	ok         bool
	overloaded bool
	// estimate is the demand estimate the plan was made from (raised to MinDemandQPS); covers the demand it was
	// sized for: more by the headroom when padded, the estimate itself when the headroom could only have been
	// bought with accuracy.
	estimate float64
	covers   float64
	padded   bool
	servers  map[string]int // per class
	fanout   map[string]pipeline.Fanout
	profiles map[string][]pipeline.ProfilePoint
	at       time.Time
}

type routedAt struct {
	demand float64
	at     time.Time
}

// New starts a loop from the plan in force; alloc nil keeps its allocation for good (a static plan).
func New(spec *pipeline.Spec, cfg Config, alloc Allocator, current *plan.Plan) *Loop {
	cfg.SetDefaults()
	return &Loop{spec: spec, cfg: cfg, alloc: alloc, current: current}
}

// Resume starts a loop from a plan an earlier planner published (read back from the KV bucket) as if this loop had
// published it at now: it is not solved again until its inputs move (demand, servers, multiplicative factors) or
// ReplanEvery passes. A plan without an allocation section (static) is solved again at the first tick, as by New.
func Resume(spec *pipeline.Spec, cfg Config, alloc Allocator, current *plan.Plan, now time.Time) *Loop {
	l := New(spec, cfg, alloc, current)
	if a := current.Allocation; a != nil {
		l.notePlanned(Observed{Demand: a.Estimate(), Servers: a.ClusterServers, Cluster: a.Cluster,
			Fanout: current.Fanout, Profiles: current.Profiles}, current, now)
		l.routed = routedAt{demand: a.Estimate(), at: now}
	}
	return l
}

// FirstPlan is the plan a pipeline starts with when there is none to resume (planner and simulator alike): the
// spec's static allocation, routed for no demand (every table sends to the most accurate variant), epoch 0. Until
// demand is measured, it stands.
func FirstPlan(spec *pipeline.Spec) (*plan.Plan, error) {
	p, err := plan.Static(spec)
	if err != nil {
		return nil, err
	}
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p})
	return p, nil
}

// Current is the plan in force (the last one published).
func (l *Loop) Current() *plan.Plan { return l.current }

// Next decides what to publish at now. The caller publishes Step.Plan and then calls Published; until it does,
// the loop proposes it again.
func (l *Loop) Next(now time.Time, o Observed) Step {
	var st Step
	if l.cfg.ProfilesOnly {
		o.Profiles = nil
	}
	if o.DemandUnknown {
		return st
	}
	if l.alloc != nil && o.Servers == 0 && len(l.current.Variants) > 0 {
		return l.shed(o)
	}
	if l.alloc != nil && o.Servers > 0 {
		st = l.replan(now, o)
		if st.Plan != nil {
			return st
		}
		// The servers cannot host the pipeline at all (fewer than its tasks: an even split of a few, or the
		// division's fallback to one), and the plan in force does not fit them either: its requests would wait out
		// their deadlines at variants no worker serves. Shed, they are refused at once and counted as demand.
		if errors.Is(st.Err, ErrCannotServe) && !fitsOn(l.current, o.OnCluster()) {
			shed := l.shed(o)
			shed.Err = st.Err
			return shed
		}
	}
	last := l.routed
	if !demand.Significant(last.demand, o.Demand, l.cfg.RouteThreshold, l.cfg.RouteSigmas, o.DemandWindow) &&
		now.Sub(last.at) < l.cfg.RouteEvery &&
		!demand.FanoutSignificant(l.spec, l.current.Fanout, o.Fanout, l.cfg.RouteThreshold, l.cfg.RouteSigmas, o.FanoutSamples) {
		return st
	}
	p := *l.current
	p.Fanout = o.Fanout
	p.Profiles = o.Profiles
	p.Routing = l.route(&p, o)
	st.Plan = &p
	return st
}

// What made a re-plan (Step.Trigger), the first that holds: its first solve, a change of the servers it has (unless
// the plan in force keeps on the new ones: keepsOnShare), a move of the demand past ReplanThreshold, demand above
// what a plan with headroom covers, measured latencies that moved, or a due look (ReplanEvery) that found a
// significant small move of the demand or of the multiplicative factors.
const (
	TriggerFirst    = "first"
	TriggerServers  = "servers"
	TriggerOutgrown = "outgrown"
	TriggerDemand   = "demand"
	TriggerLatency  = "latency"
	TriggerDue      = "due"
	TriggerShed     = "shed"
)

// replan solves the allocation when its inputs moved or it is due.
func (l *Loop) replan(now time.Time, o Observed) Step {
	target := l.target(o)
	last := l.planned
	due := now.Sub(last.at) >= l.cfg.ReplanEvery
	// An overloaded plan already serves all it can: a demand above it is no reason to solve again every second.
	// A plan sized for the estimate alone (no headroom, or none to be had without lowering the accuracy) waits for
	// the thresholds like any other: re-planning at every rise of the estimate would move workers each second.
	outgrown := last.padded && !last.overloaded && o.Demand > last.covers &&
		demand.Significant(last.covers, o.Demand, 0, l.cfg.ReplanSigmas, o.DemandWindow)
	// The noise is the demand's, not the headroom's: compare estimates. A move beyond ReplanThreshold is planned for
	// at once (a 20% move of a steady load's estimate is a 3-sigma event even at 10 QPS, where the average is
	// sized to the rate); with ReplanSigmas, the small moves a due re-plan looks at must also be significant.
	moved := func(threshold, sigmas float64) bool {
		return demand.Significant(last.estimate, max(o.Demand, l.cfg.MinDemandQPS), threshold, sigmas, o.DemandWindow)
	}
	var kept *plan.Plan // the plan in force, published again on the new servers it keeps on
	servers := o.OnCluster().Counts()
	if !maps.Equal(servers, last.servers) && l.keepsOnShare(o) {
		l.planned.servers, last.servers = servers, servers // no reason to solve
		kept = l.onShare(o)
	}
	trigger := TriggerDue
	switch {
	case !last.ok:
		trigger = TriggerFirst
	case !maps.Equal(servers, last.servers):
		trigger = TriggerServers
	case moved(l.cfg.ReplanThreshold, -1) && !l.absorbs(o):
		trigger = TriggerDemand
	case outgrown:
		trigger = TriggerOutgrown
	case l.latencyMoved(now, o):
		trigger = TriggerLatency
	}
	forced := trigger != TriggerDue
	if !forced {
		if !due {
			return Step{Plan: kept}
		}
		// Hysteresis: a small fall must be significant (FallSigmas) before it is planned for. Each re-plan to
		// the estimate of the moment would otherwise follow the noise up and down, a server more, a server less
		// (a steady 100 QPS on 10 workers re-planned every 20 s); a small rise is planned for, the fall after it
		// is not, and the plan settles on the high side of the noise.
		sigmas := l.cfg.ReplanSigmas
		if o.Demand < last.estimate {
			sigmas = max(sigmas, FallSigmas)
		}
		// A move of a measured multiplicative factor is planned for either way: holding a factor that fell, as the
		// demand's falls are held, cost the simulator's diurnal hour a tenth of a point of accuracy and 0.04 points of
		// violations (seeds 1-5).
		if !moved(replanMinChange, sigmas) && !demand.FanoutSignificant(l.spec, last.fanout, o.Fanout, l.cfg.RouteThreshold,
			l.cfg.ReplanSigmas, o.FanoutSamples) {
			l.planned.at = now // looked again: nothing worth a new plan
			return Step{Plan: kept}
		}
	}
	in := o
	in.Demand = target
	in.EscalationScale = escalationScale(l.spec, l.current, o.Escalation)
	spec := l.specFor(o)
	p, err := l.sizer().Allocate(spec, in)
	solveMs := solveMsOf(p)
	if err == nil && l.cfg.headroom() > 0 && p.Mode != plan.ModeHardware {
		in.Demand = l.cfg.Planned(o.Demand, false)
		p, err = l.alloc.Allocate(spec, in)
		solveMs += solveMsOf(p)
	}
	if err != nil {
		l.notePlanned(o, nil, now)
		return Step{Err: err}
	}
	p = l.gearRange(spec, in, p)
	if p.Allocation != nil {
		p.Allocation.EstimateQPS = o.Demand
		priceOn(p, o.OnCluster())
	}
	if l.cfg.Gears {
		p.Gears = gears.Tables(spec, p, in.EscalationScale, gears.Utilization(l.cfg.RouteUtilization),
			l.gearInput(spec, in, p))
	}
	if same := sameAllocation(l.current, p); same || !forced && !l.worthSwapping(p, o) {
		// The same allocation, or a better one not worth its model loads: no new epoch, which would move no worker
		// and only count as a plan change (on a loaded machine the measured latencies of a steady 10 QPS moved
		// by 20% every few seconds, and re-planned the same allocation 28 times in 5 minutes). What moved is
		// followed by the routing, as a re-plan's would have been. A forced re-plan that found the same allocation
		// made it the plan for what it observed: the triggers start from there; a due one leaves them where they
		// were, so that the noise does not move them.
		r := *l.current
		if kept != nil { // on the servers it keeps on
			r = *kept
		}
		r.Fanout, r.Profiles = o.Fanout, o.Profiles
		if same && forced {
			r.Allocation = p.Allocation
			l.notePlanned(o, &r, now)
		} else {
			l.planned.at = now
		}
		r.Routing = l.route(&r, o)
		outcome := SolveNotTaken
		if same {
			outcome = SolveSame
		}
		return Step{Plan: &r, Solved: &Solve{Trigger: trigger, Ms: solveMs, Outcome: outcome}}
	}
	p.Pipeline = l.spec.Name
	p.Epoch = l.current.Epoch + 1
	p.Fanout = o.Fanout
	p.Profiles = o.Profiles
	p.Routing = l.route(p, o)
	return Step{Plan: p, Replanned: true, Trigger: trigger,
		Solved: &Solve{Trigger: trigger, Ms: solveMs, Outcome: SolveNewPlan}}
}

// solveMsOf is the solve time an allocator's plan reports (0 for none, or a plan without an allocation).
func solveMsOf(p *plan.Plan) float64 {
	if p == nil || p.Allocation == nil {
		return 0
	}
	return p.Allocation.SolveMs
}

// sizer is the allocator of a re-plan's first solve. With headroom, that solve's plan is kept only in hardware
// mode, which a check of the plans in accuracy mode alone (CheckEdge) leaves unchecked: it is solved unchecked,
// and the plan for the estimate itself, when it comes to that, checked.
func (l *Loop) sizer() Allocator {
	if c, ok := l.alloc.(Checked); ok && c.AccuracyModeOnly && l.cfg.headroom() > 0 {
		return c.Inner
	}
	return l.alloc
}

// shed is the plan of a pipeline the division of the workers left none (the joint allocation shed its class): it
// hosts nothing, its frontends refuse its requests (it serves 0 of the demand), and the first share of workers it
// gets again forces a re-plan (the servers changed).
func (l *Loop) shed(o Observed) Step {
	return Step{Replanned: true, Trigger: TriggerShed, Plan: &plan.Plan{Pipeline: l.spec.Name, Epoch: l.current.Epoch + 1,
		Mode: plan.ModeOverloaded, Fanout: o.Fanout, Profiles: o.Profiles,
		Allocation: &plan.Allocation{DemandQPS: o.Demand, EstimateQPS: o.Demand, Optimal: true}}}
}

// fitsOn says whether p's replicas fit the servers of cluster, class by class.
func fitsOn(p *plan.Plan, cluster plan.Cluster) bool {
	have := cluster.Counts()
	for class, n := range p.ServersByClass() {
		if n > have[class] {
			return false
		}
	}
	return true
}

// worthSwapping says whether a re-plan that nothing forced (a due one, on a small move of the demand or of the
// multiplicative factors) is worth the model loads it costs. Each replica the new plan adds to a variant is a worker
// that loads the variant's model (its swap time) before it serves: for that long, the items it would have served
// wait, and are counted as lost, at the current plan's accuracy. The gain is the accuracy the new plan adds to every
// request until the next due re-plan. A plan that frees servers (hardware scaling down) is always taken, and one
// whose variants load instantly unless it is in hardware mode and no better than the plan in force, which covers
// the estimate with its headroom (noBetterInHardware); one that moves models for less accuracy than its loads cost
// is not, so that the estimate's small moves do not flip a plan between two variants at each swap's price. Under
// overload, one that only spends a task's slack on accuracy is not taken either (upgradesAtOverload).
func (l *Loop) worthSwapping(p *plan.Plan, o Observed) bool {
	cur := l.current
	if cur.Allocation == nil || p.Allocation == nil || p.Allocation.ActiveServers < cur.Allocation.ActiveServers {
		return true
	}
	if l.planned.padded && o.Demand <= l.planned.covers && noBetterInHardware(cur, p) {
		return false // the plan in force covers the estimate with its headroom, as well as this one would
	}
	if upgradesAtOverload(cur, p) {
		return false
	}
	lost := 0.0 // items not served during the model loads
	for _, vp := range p.Variants {
		added := vp.Replicas
		if old := cur.Find(vp.Task, vp.Variant); old != nil {
			added -= old.Replicas
		}
		v := l.spec.Variant(vp.Task, vp.Variant)
		if added <= 0 || v == nil || vp.Replicas == 0 {
			continue
		}
		lost += float64(added) * v.SwapMs / 1000 * vp.CapacityQPS / float64(vp.Replicas)
	}
	if lost == 0 {
		return true
	}
	cost := lost * cur.Allocation.SystemAccuracy
	gain := (p.Allocation.SystemAccuracy - cur.Allocation.SystemAccuracy) * max(o.Demand, l.cfg.MinDemandQPS) *
		l.cfg.ReplanEvery.Seconds()
	return gain > cost
}

// noBetterInHardware says plan b, like a, is in hardware mode, on the same servers at the same cost, for no more
// accuracy: it differs in batch sizes or in the share of a less accurate variant. A due look's small move of the
// estimate, within what the plan in force covers with its headroom, found such a plan at look after look: a steady
// 40 QPS of traffic took a new epoch every 10 s in the soak (accuracy 0.442, 0.444, 0.443), each an assignment
// written for every worker; in the simulator, 14 re-plans in 10 minutes, and 4 without them.
func noBetterInHardware(a, b *plan.Plan) bool {
	return a.Mode == plan.ModeHardware && b.Mode == plan.ModeHardware &&
		a.Allocation.ActiveServers == b.Allocation.ActiveServers &&
		a.Allocation.CostPerHour == b.Allocation.CostPerHour &&
		b.Allocation.SystemAccuracy <= a.Allocation.SystemAccuracy+1e-9
}

// upgradesAtOverload says plan b, like a, is overloaded, serves no more than a (within 2%), and hosts each task on as
// many servers of each class, with variants (and batch sizes) that add up to more accuracy: a due look found the
// measured factors left a task that is not the bottleneck some slack, and spent it on accuracy. Under overload,
// admission control keeps every queue full, and that slack is what absorbs the load's swings downstream (the cars
// in a frame): live, six workers at twice their capacity answered 305-316 a second in time under plans with two
// effnet_b0 car classifiers, and 288 under a due look's plan that swapped one for effnet_b1 (system accuracy 0.227
// to 0.229; docs/admission.md "Overload, live"). A plan that moves servers between tasks, or serves more, is taken.
func upgradesAtOverload(a, b *plan.Plan) bool {
	if a.Mode != plan.ModeOverloaded || b.Mode != plan.ModeOverloaded ||
		b.Allocation.ServedQPS > a.Allocation.ServedQPS*1.02 || b.Allocation.SystemAccuracy <= a.Allocation.SystemAccuracy {
		return false
	}
	type taskClass struct{ task, class string }
	servers := map[taskClass]int{}
	for _, v := range a.Variants { // the class from the variant's name, which every plan carries
		servers[taskClass{v.Task, wire.ClassOf(v.Variant)}] += v.Replicas
	}
	for _, v := range b.Variants {
		servers[taskClass{v.Task, wire.ClassOf(v.Variant)}] -= v.Replicas
	}
	for _, n := range servers {
		if n != 0 {
			return false
		}
	}
	return true
}

// sameAllocation says whether two plans host the same replicas of the same variants at the same batch sizes (and run
// the same cascades, at the same thresholds unless both carry gear tables): a new epoch for it would move no worker,
// and only count as a plan change.
func sameAllocation(a, b *plan.Plan) bool {
	// With gear tables on both, thresholds are the gears' to change: the same cascades on the same placement.
	geared := a.Gears != nil && b.Gears != nil && maps.EqualFunc(a.Cascades, b.Cascades, func(float64, float64) bool {
		return true
	})
	if a.Allocation == nil || b.Allocation == nil || a.Mode != b.Mode || len(a.Variants) != len(b.Variants) ||
		!geared && !maps.Equal(a.Cascades, b.Cascades) {
		return false
	}
	for _, v := range b.Variants {
		if w := a.Find(v.Task, v.Variant); w == nil || w.Replicas != v.Replicas || w.MaxBatch != v.MaxBatch {
			return false
		}
	}
	return true
}

// priceOn records in p's allocation the cluster it was planned on (when it has classes or prices) and the hourly
// price of the servers it uses, whatever the allocator: the planner's gauge, plan --live and loadgen read them.
func priceOn(p *plan.Plan, cluster plan.Cluster) {
	a := p.Allocation
	if !cluster.Classless() || cluster.Priced() {
		a.Cluster = cluster
	}
	a.CostPerHour = cluster.Cost(p.ServersByClass())
}

// target is the demand a plan for o is sized for.
func (l *Loop) target(o Observed) float64 { return l.cfg.Planned(o.Demand, true) }

func (l *Loop) route(p *plan.Plan, o Observed) plan.Routing {
	in := routing.Input{Spec: l.specFor(o), Plan: p, Demand: o.Demand, Fanout: o.Fanout, Utilization: l.cfg.RouteUtilization}
	if r, ok := l.alloc.(Router); ok {
		return r.Route(in)
	}
	return routing.MostAccurateFirst(in)
}

// notePlanned records that p (nil: none, the solve failed) was made from o at now.
func (l *Loop) notePlanned(o Observed, p *plan.Plan, now time.Time) {
	est := max(o.Demand, l.cfg.MinDemandQPS)
	l.planned = plannedAt{ok: true, estimate: est, covers: est, servers: o.OnCluster().Counts(), fanout: o.Fanout,
		profiles: o.Profiles, at: now}
	if p != nil && p.Allocation != nil {
		l.planned.overloaded = p.Mode == plan.ModeOverloaded
		if c := p.Allocation.DemandQPS; c > est*(1+1e-9) {
			l.planned.covers, l.planned.padded = c, true
		}
	}
}

// Published records that st.Plan, decided from o, is now in force.
func (l *Loop) Published(st Step, o Observed, now time.Time) {
	if st.Plan == nil {
		return
	}
	l.current = st.Plan
	if l.cfg.ProfilesOnly { // as Next saw it: a plan made from the profiles alone is not one made from these
		o.Profiles = nil
	}
	if st.Replanned {
		l.notePlanned(o, st.Plan, now)
	}
	l.routed = routedAt{demand: o.Demand, at: now}
}
