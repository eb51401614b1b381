// The tuner's looks at the queues between plans (pkg/tuner), and the assignment of workers with its loans.

package core

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/tuner"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Looked is what one look decided.
type Looked struct {
	// Loans says the tuner's loans changed: the caller reassigns the workers (Assign).
	Loans bool
	// Rehome are the pipelines whose retired variants' queues the caller moves now (a new plan was published
	// within RehomeAfterPlan).
	Rehome []*Pipeline
}

// Look is the tuner's look at the queues with able workers: queues holds, per pipeline, the messages waiting or
// in service at each hosted variant ("task/variant"); a pipeline left out was not seen (its look is skipped).
func (c *Cluster) Look(now time.Time, able plan.Cluster, queues map[string]map[string]float64) Looked {
	var out Looked
	for _, p := range c.byPriority {
		q, seen := queues[p.Spec.Name]
		if !seen {
			continue
		}
		p.queues = q
		if now.Sub(p.replannedAt) < RehomeAfterPlan {
			out.Rehome = append(out.Rehome, p)
		}
		if p.tuner == nil {
			continue
		}
		lent, changed := p.tuner.LookSince(now, c.tuneInput(p, able), p.lent)
		if !changed {
			continue
		}
		p.lent, out.Loans = lent, true
	}
	if out.Loans {
		c.showLoans()
	}
	return out
}

// Tunes says whether the tuner looks (the caller schedules Look every Control.TuneEvery).
func (c *Cluster) Tunes() bool { return c.cfg.Control.Tunes() }

// TuneEvery is how often the caller looks.
func (c *Cluster) TuneEvery() time.Duration { return c.cfg.Control.TuneEvery }

// tuneInput is what p's tuner sees under its plan in force with able workers: the queues as of the last look, in
// items (the messages times the items the workers' messages held of late: demand.MessageSize), and the workers it
// may use per class.
func (c *Cluster) tuneInput(p *Pipeline, able plan.Cluster) tuner.Input {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := p.Current()
	p.know(cur)
	in := tuner.ObserveInto(p.variants, func(i int) string { return p.keys[i].variant }, p.Spec, cur, p.scale,
		func(i int) float64 { return p.queues[p.keys[i].variant] * c.messages.Of(p.keys[i].served) },
		c.usable(p, able), p.demand.Estimate(), c.cfg.Control.RouteUtilization)
	p.variants = in.Variants
	return in
}

// know works out what the looks read of plan cur, p's plan in force, once per plan: its budget scale and its
// servers per class.
func (p *Pipeline) know(cur *plan.Plan) {
	if p.scaleOf != cur {
		p.scale, p.byClass, p.scaleOf = cur.BudgetScale(p.Spec), cur.ServersByClass(), cur
		p.keys = p.keys[:0]
		for _, vp := range cur.Variants {
			k := wire.VariantKey{Task: vp.Task, Variant: vp.Variant}
			p.keys = append(p.keys, lookKeys{variant: k.String(), served: k.In(p.Spec.Name).String()})
		}
	}
}

// lookKeys are a hosted variant's keys as a look reads them: "task/variant" (the queues') and
// "pipeline:task/variant" (the message sizes').
type lookKeys struct{ variant, served string }

// usable are the workers p's tuner sees, per class: those its plan hosts replicas on, and the ones it may lend,
// those no pipeline's plan hosts a replica on and no other pipeline's tuner has lent. Pipelines look in priority
// order (Look), so a higher priority lends first. A worker is lent only to a variant of its class (tuner.Input).
func (c *Cluster) usable(p *Pipeline, able plan.Cluster) plan.Cluster {
	free := able.Counts()
	for _, q := range c.pipes {
		q.know(q.Current())
		for class, n := range q.byClass {
			free[class] -= n
		}
		if q != p {
			for key, n := range q.lent {
				free[wire.ClassOf(key)] -= n
			}
		}
	}
	out := make(plan.Cluster, 0, len(able))
	own := p.byClass // known: p is one of c.pipes
	for _, sc := range able {
		sc.Servers = own[sc.Name] + max(free[sc.Name], 0)
		out = append(out, sc)
	}
	if maxCost := c.cfg.Control.MaxCostPerHour; maxCost > 0 {
		withinCostCap(out, own, maxCost)
	}
	return out
}

// withinCostCap trims the workers a tuner may lend (those of usable beyond own, the plan's) to what the cost cap
// leaves over the plan's own servers, the cheapest class first: whatever the tuner lends of them, the servers in
// use stay within the cap (Control.MaxCostPerHour).
func withinCostCap(usable plan.Cluster, own map[string]int, maxCost float64) {
	budget := maxCost
	for _, sc := range usable {
		budget -= float64(own[sc.Name]) * sc.PricePerHour
	}
	order := make([]int, len(usable))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(usable[a].PricePerHour, usable[b].PricePerHour) })
	for _, i := range order {
		sc := &usable[i]
		lendable := sc.Servers - own[sc.Name]
		if sc.PricePerHour > 0 {
			lendable = min(lendable, max(int(math.Floor(budget/sc.PricePerHour+1e-9)), 0))
		}
		budget -= float64(lendable) * sc.PricePerHour
		sc.Servers = own[sc.Name] + lendable
	}
}

// Lent are p's loans in force.
func (p *Pipeline) Lent() map[string]int { return p.lent }

// Excess is how many of the pending messages at task/variant, a variant of p's plan in force, the caller moves to
// the task's other variants (plan.Sibling) at a look within RehomeAfterPlan of a new plan (Looked.Rehome): those
// beyond what its replicas and loans take soon (plan.Excess), when that plan cut the variant's replicas; 0
// otherwise. A variant the plan did not cut keeps its queue: its replicas take what its upstream sends it.
func (p *Pipeline) Excess(task, variant string, pending int) int {
	if !p.Cut(task, variant) {
		return 0
	}
	return p.Current().Excess(task, variant, pending, p.lent[wire.VariantKey{Task: task, Variant: variant}.String()])
}

// Cut says the last new plan of p hosts fewer replicas of task/variant than the plan before it did with its loans:
// the variants whose queues Excess moves.
func (p *Pipeline) Cut(task, variant string) bool {
	return p.cut[wire.VariantKey{Task: task, Variant: variant}.String()]
}

// cutVariants are the "task/variant"s that plan next hosts fewer replicas of than prev did with the loans lent.
func cutVariants(prev, next *plan.Plan, lent map[string]int) map[string]bool {
	if prev == nil || next == nil {
		return nil
	}
	var cut map[string]bool
	for _, vp := range prev.Variants {
		key := wire.VariantKey{Task: vp.Task, Variant: vp.Variant}.String()
		had := vp.Replicas + lent[key]
		if nv := next.Find(vp.Task, vp.Variant); had > 0 && nv != nil && nv.Replicas > 0 && nv.Replicas < had {
			if cut == nil {
				cut = map[string]bool{}
			}
			cut[key] = true
		}
	}
	return cut
}

// Assign gives the replicas of every pipeline's plan in force and the tuner's loans to the able workers (in name
// order), each replica to a worker of its variant's class (classes: each worker's; nil or a worker left out, the
// default class), moving as few from prev as it can (plan.Assign); unplaced is how many replicas got no worker.
func (c *Cluster) Assign(able []string, classes map[string]string, prev map[string]plan.Assignment) (
	next map[string]plan.Assignment, unplaced int) {
	plans := make([]*plan.Plan, len(c.pipes))
	for i, p := range c.pipes {
		plans[i] = tuner.WithLoans(p.Current(), p.lent)
	}
	return plan.Assign(plans, able, classes, prev)
}
