package control

import (
	"maps"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// GearRange is how far above the demand it is sized for a geared cascade plan's placement may reach
// (CascadeServe's one placement for a range of load): up to GearRange times that demand, the most that still runs
// the estimate as accurately as the plan for it (gearRange). The step of the comparison (100 to 260 QPS)
// is 2.6 times the load before it; docs/cascades.md#gears.
const GearRange = 3.0

// gearRangeSolves is how many allocations the search for a placement's range solves: GearRange itself, then a
// bisection below it (within an eighth of the range).
const gearRangeSolves = 4

// gearRange is, for base, the plan sized for in.Demand of a loop with gears, the placement sized for the largest
// demand up to GearRange times in.Demand that hosts every variant of base with at least base's capacity (the same
// cascades): at the estimate it serves as accurately as base, the gears giving up accuracy only as the load rises
// past what base carries, and a rise up to the larger demand needs no new placement (absorbs). It runs base's
// thresholds, in base's mode, and expects base's accuracy; its Allocation.DemandQPS is the larger demand. base when
// no larger placement does, base runs no cascade or fills the cluster. The candidates are checked where the loop
// checks (the plans in accuracy mode, by default): the larger demand is what the placement must carry when the
// gears take a rise without a new placement.
func (l *Loop) gearRange(spec *pipeline.Spec, in Observed, base *plan.Plan) *plan.Plan {
	// Only a plan in hardware mode leaves servers for a larger placement: one that fills the cluster (accuracy mode)
	// has none to host more of every variant with.
	if !l.cfg.Gears || len(base.Cascades) == 0 || base.Allocation == nil || base.Mode != plan.ModeHardware {
		return base
	}
	best := base
	try := func(f float64) bool {
		o := in
		o.Demand = in.Demand * f
		q, err := l.alloc.Allocate(spec, o)
		if err != nil || q.Mode == plan.ModeOverloaded || !dominates(q, base) {
			return false
		}
		best = q
		return true
	}
	if !try(GearRange) {
		lo, hi := 1.0, GearRange
		for range gearRangeSolves - 1 {
			if f := (lo + hi) / 2; try(f) {
				lo = f
			} else {
				hi = f
			}
		}
	}
	if best == base {
		return base
	}
	r := *best
	// The mode of the plan for the estimate, which the range plan serves as it does: the larger demand's may be
	// accuracy mode (a full cluster at that demand), which the estimate is not served in.
	r.Mode = base.Mode
	r.Cascades = maps.Clone(base.Cascades)
	a := *best.Allocation
	a.SystemAccuracy = base.Allocation.SystemAccuracy
	r.Allocation = &a
	return &r
}

// dominates says q runs the cascades p runs and hosts every variant of p with at least p's capacity: whatever p
// serves, q serves as accurately.
func dominates(q, p *plan.Plan) bool {
	if len(q.Cascades) != len(p.Cascades) {
		return false
	}
	for t := range p.Cascades {
		if _, ok := q.Cascades[t]; !ok {
			return false
		}
	}
	for _, v := range p.Variants {
		w := q.Find(v.Task, v.Variant)
		if w == nil || w.CapacityQPS < v.CapacityQPS*(1-1e-9) {
			return false
		}
	}
	return true
}

// absorbs says a move of the demand to o's estimate is the gears' to follow, not a new placement's: the geared plan
// in force was sized for at least it (a rise within its range), or the estimate fell, which the due re-plans follow
// with their hysteresis (a fall within the range loses no accuracy: the gears go back to the more accurate levels).
func (l *Loop) absorbs(o Observed) bool {
	return l.cfg.Gears && len(l.current.Gears) > 0 && l.planned.padded && o.Demand <= l.planned.covers
}

// gearInput is the allocation's input p was solved with, for its gears' batch sizes (gears.Tables): its demand
// and latency model (the plan check may take the paper's), the loop's routing utilization. nil without
// GearBatches, and for a plan of no allocation (static, or an allocator's without one).
func (l *Loop) gearInput(spec *pipeline.Spec, in Observed, p *plan.Plan) *allocate.Input {
	if !l.cfg.GearBatches || p.Allocation == nil {
		return nil
	}
	in.Demand = p.Allocation.DemandQPS
	a := MILP{Utilization: l.cfg.RouteUtilization, LatencyModel: allocate.LatencyModel(p.Allocation.LatencyModel)}
	i := a.input(spec, in)
	return &i
}
