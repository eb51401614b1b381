// Package gears is CascadeServe's gear switching (docs/cascades.md, "Gears"): a cascade's plan carries, for its
// placement (the replicas of the first and the next variant), a gear table, the most accurate threshold for each
// range of load the placement carries; the first variant's workers measure their load and switch gears within
// about 100 ms, at once on the way up and with hysteresis on the way down, while the planner re-plans only when the
// placement must change. Pure: time is passed in. The planner's control loop (pkg/control) computes the tables; the
// live workers and the simulator's servers switch with the same Switch.
package gears

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// Tables is the gear table of each cascade plan p runs (p.Cascades): per level of the cascade, the most load (items a
// second per replica of the first variant) its placement carries at that level at utilization (the routing's share
// of each replica's capacity): every item on the first variant, the level's share of them (times scale, the
// measured escalation over the profiled one, per task; absent: 1) on the next. With in (the allocation's input p was
// solved with; nil: the plan's batches alone), each level runs the cascade's two variants at the max batches that
// carry the most at it of those the allocation's model allows on the placement (allocate.GearSizings: every path
// through the cascade within its latency budget), listed in the gear where they are not the plan's. A level is a
// gear when it carries more than every more accurate one; the gears are most accurate first. nil when p runs no
// cascade.
func Tables(spec *pipeline.Spec, p *plan.Plan, scale map[string]float64, utilization float64,
	in *allocate.Input) map[string][]plan.Gear {
	var out map[string][]plan.Gear
	for task := range p.Cascades {
		t := spec.Task(task)
		if t == nil || t.Cascade == nil || len(t.Cascade.Levels) == 0 {
			continue
		}
		first, next := p.Find(task, t.Cascade.Variants[0]), p.Find(task, t.Cascade.Variants[1])
		if first == nil || next == nil || first.Replicas <= 0 {
			continue
		}
		s := 1.0
		if v, ok := scale[task]; ok && v > 0 {
			s = v
		}
		levels := append([]pipeline.CascadeLevel(nil), t.Cascade.Levels...)
		sort.SliceStable(levels, func(i, j int) bool { return levels[i].Value() > levels[j].Value() })
		var table []plan.Gear
		for _, l := range levels {
			e := min(1, l.Escalation*s)
			g := plan.Gear{MaxLoad: carried(first.CapacityQPS, next.CapacityQPS, e), Threshold: l.Threshold}
			if in != nil {
				g = faster(g, allocate.GearSizings(*in, p, task, l.Threshold, scale), first, next, e)
			}
			g.MaxLoad *= utilization / float64(first.Replicas)
			if n := len(table); n > 0 && g.MaxLoad <= table[n-1].MaxLoad {
				continue // less accurate, and carries no more
			}
			table = append(table, g)
		}
		if out == nil {
			out = map[string][]plan.Gear{}
		}
		out[task] = table
	}
	return out
}

// carried is the items a second a cascade's first variant takes when its replicas carry first (items a second) and
// the next variant's next, a share e of them sent on.
func carried(first, next, e float64) float64 {
	if e > 0 {
		return min(first, next/e)
	}
	return first
}

// faster is gear g (its MaxLoad the items a second the plan's batches carry) at the sizing that carries the most of
// sizings (the plan's batches first: the others' capacities are taken relative to theirs, so that a gear at the
// plan's batches carries what the plan says), listing the batches that are not the plan's: a gear runs other batches
// only where they carry more, the plan's (which the planner chose and measures) otherwise. Of sizings that carry as
// much more, the one with the most capacity to spare.
//
// A sizing that gives either variant less capacity than the plan's batches is left out. Replicas switch gears on
// their own, so items of several gears meet at the next variant (which runs the smallest of their batches), and a
// first variant slowed by its gear takes fewer items, measures less load and stays in that gear. With every gear at
// least the plan's capacity on both variants, a mix of gears carries at least what the plan does.
func faster(g plan.Gear, sizings []allocate.GearSizing, first, next *plan.VariantPlan, e float64) plan.Gear {
	if len(sizings) < 2 || sizings[0].Capacity[0] <= 0 || sizings[0].Capacity[1] <= 0 {
		return g
	}
	base := sizings[0]
	// spare is a sizing's capacity on both variants, relative to the plan's batches'.
	spare := func(z allocate.GearSizing) float64 {
		return z.Capacity[0]/base.Capacity[0] + z.Capacity[1]/base.Capacity[1]
	}
	best, load := base, g.MaxLoad
	for _, z := range sizings[1:] {
		if z.Capacity[0] < base.Capacity[0] || z.Capacity[1] < base.Capacity[1] {
			continue
		}
		l := carried(first.CapacityQPS*z.Capacity[0]/base.Capacity[0],
			next.CapacityQPS*z.Capacity[1]/base.Capacity[1], e)
		const eps = 1e-9
		switch {
		case l > load*(1+eps):
		case l < load*(1-eps), best == base || spare(z) <= spare(best)*(1+eps):
			continue // carries less, or as much as the plan's batches, or as much and spares no more
		}
		best, load = z, l
	}
	g.MaxLoad = load
	for i, vp := range []*plan.VariantPlan{first, next} {
		if best.Batch[i] != base.Batch[i] {
			if g.Batches == nil {
				g.Batches = map[string]plan.GearBatch{}
			}
			g.Batches[vp.Variant] = plan.GearBatch{MaxBatch: best.Batch[i], BudgetMs: best.P50Ms[i]}
		}
	}
	return g
}

// Utilization is the share of each replica's capacity a gear table fills, for a plan routed at route (its
// routing's utilization): a quarter of the headroom the routing keeps (96.25% of capacity with the routing's 85%).
// The routing's share must hold for the seconds until the next routing or plan, a gear's only until its switch
// moves, within a window or two of a rise. And the plan's threshold alone runs on past its routing's share until
// the next plan: a gear left where it still fits gives up accuracy the plan alone keeps (docs/cascades.md#gears:
// half the headroom, 92.5%, was less accurate than the plan alone on the simulated trace; all of it, 100%, had more
// violations).
func Utilization(route float64) float64 { return route + 3*(1-route)/4 }

// Defaults of a Switch.
const (
	// Every is how often a Switch measures the load and decides: CascadeServe's 100 ms.
	Every = 100 * time.Millisecond
	// Smoothing is the time constant of the measured load: several of Every's windows, so that a window of a batch
	// or two does not swing the gear on its noise (live, 150 ms switched 216 times in 30 s at a steady load).
	// a few items does not swing the gear on its noise.
	Smoothing = 500 * time.Millisecond
	// Hysteresis is how far below a more accurate gear's most load the measured load must fall before the switch
	// goes back to it: a load at the edge of two gears does not flip between them.
	Hysteresis = 0.1
)

// Switch is one replica's gear switching on a gear table: it counts the items the replica takes, measures their
// rate every Every (smoothed over Smoothing), and moves to the most accurate gear the rate fits (a less accurate one
// at once, a more accurate one once the rate is Hysteresis below its most load). Not safe for concurrent use.
type Switch struct {
	table   []plan.Gear
	current int
	start   time.Time // of the window being counted
	count   float64
	rate    float64 // smoothed items a second
	last    float64 // items a second in the last window
	// batch is the smoothed items per Observe: items come in batches, whose count in a window varies that much
	// more than single arrivals' would.
	batch    float64
	measured bool
}

// NewSwitch switches on table starting at the gear of threshold (the plan's; the most accurate when none matches).
func NewSwitch(table []plan.Gear, threshold float64) *Switch {
	s := &Switch{table: table}
	for i, g := range table {
		if g.Threshold == threshold {
			s.current = i
		}
	}
	return s
}

// Observe counts n items taken at now, after closing the windows that ended before now: at the end of each, the
// rate is measured and the gear moved.
func (s *Switch) Observe(now time.Time, n int) {
	if s.start.IsZero() {
		s.start = now
	}
	if now.Sub(s.start) > time.Second { // idle for long: the windows before say only that nothing came
		s.start, s.count, s.rate, s.measured = now, 0, 0, true
		s.shift()
	}
	for !now.Before(s.start.Add(Every)) {
		w := Every.Seconds()
		r := s.count / w
		s.last = r
		if !s.measured {
			s.rate, s.measured = r, true
		} else {
			s.rate += (1 - math.Exp(-w/Smoothing.Seconds())) * (r - s.rate)
		}
		s.count = 0
		s.start = s.start.Add(Every)
		s.shift()
	}
	s.count += float64(n)
	if n > 0 {
		if s.batch == 0 {
			s.batch = float64(n)
		}
		s.batch += 0.1 * (float64(n) - s.batch)
	}
}

// shift moves to the gear the measured rate calls for: a faster one when the smoothed rate is above what the gear
// carries, or the last window's alone by more than twice the noise of a window's count of batches of items (a step
// of the load, taken within the window it came in); back to a more accurate one with hysteresis.
func (s *Switch) shift() {
	w := Every.Seconds()
	for s.current < len(s.table)-1 {
		most := s.table[s.current].MaxLoad
		if s.rate <= most && s.last <= most+2*math.Sqrt(max(s.batch, 1)*most*w)/w {
			break
		}
		s.current++
	}
	for s.current > 0 && s.rate < (1-Hysteresis)*s.table[s.current-1].MaxLoad {
		s.current--
	}
}

// Threshold is the gear in force's threshold (0 with an empty table).
func (s *Switch) Threshold() float64 {
	if len(s.table) == 0 {
		return 0
	}
	return s.table[s.current].Threshold
}

// Rate is the measured load, items a second.
func (s *Switch) Rate() float64 { return s.rate }

// For is the gear table task/variant's replicas switch on under p: the table of the task's cascade when variant is its
// first, nil otherwise (no cascade, no table, or another variant).
func For(spec *pipeline.Spec, p *plan.Plan, task, variant string) []plan.Gear {
	if p == nil {
		return nil
	}
	t := spec.Task(task)
	if _, on := p.Cascades[task]; !on || t == nil || t.Cascade == nil || t.Cascade.Variants[0] != variant {
		return nil
	}
	return p.Gears[task]
}

// Follow is a replica's switch under a new plan: sw itself when the plan's table for task/variant is the one sw
// switches on (a new routing of the same placement), a new switch from the plan's threshold when it is another, nil
// when there is none.
func Follow(sw *Switch, spec *pipeline.Spec, p *plan.Plan, task, variant string) *Switch {
	table := For(spec, p, task, variant)
	switch {
	case len(table) == 0:
		return nil
	case sw != nil && slices.EqualFunc(sw.table, table, plan.Gear.Equal):
		return sw
	}
	return NewSwitch(table, p.Cascades[task])
}

// ItemGear is the gear an item is run at by a replica: the threshold its message carries (sent on by a cascade's
// first variant under a gear), else the replica's own gear (sw, at a cascade's first variant), else 0 (the plan's).
func ItemGear(message float64, sw *Switch) float64 {
	switch {
	case message > 0:
		return message
	case sw != nil:
		return sw.Threshold()
	}
	return 0
}

// MaxBatch is the max batch of a replica of task/variant under p for items of gear th (ItemGear): the gear's where
// its table lists one for the variant, else planBatch, the plan's.
//
// A batch of items of several gears runs at the smallest of their gears' max batches (a caller lowers its limit
// with each message it takes): each item's path fits its latency budget at its own gear's batches, and a gear that
// runs the first stage at a larger batch leaves the next less time, so the oldest item's gear alone could put an
// item behind a larger batch than its path has room for.
func MaxBatch(p *plan.Plan, task, variant string, planBatch int, th float64) int {
	if th <= 0 || p == nil || len(p.Gears) == 0 {
		return planBatch
	}
	if g, ok := p.GearAt(task, th); ok {
		if b, ok := g.Batches[variant]; ok {
			return b.MaxBatch
		}
	}
	return planBatch
}
