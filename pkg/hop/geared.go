package hop

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// Geared is a replica's forwarding under one plan per gear of its task's cascade (pkg/gears): the plan's table, and
// for each gear that runs the cascade's variants at other max batches (plan.Gear.Batches), a table made on the plan
// in that gear (plan.InGear), whose deadline stage and escalation budget the cascade's stages at the gear's batches.
// A gear's table is made when first asked for; prepare (nil: none) finishes each as the caller finishes the plan's.
type Geared struct {
	spec     *pipeline.Spec
	p        *plan.Plan
	policy   deadline.Policy
	task     string
	variant  string
	budget   time.Duration
	children []string
	prepare  func(*Table)
	base     *Table
	by       map[float64]*Table
}

// NewGeared is the forwarding per gear of task/variant under p, base its table at the plan's batches
// (ForReplica's, with the same arguments).
func NewGeared(base *Table, spec *pipeline.Spec, p *plan.Plan, policy deadline.Policy, task, variant string,
	budget time.Duration, children []string, prepare func(*Table)) *Geared {
	return &Geared{spec: spec, p: p, policy: policy, task: task, variant: variant, budget: budget, children: children,
		prepare: prepare, base: base}
}

// For is the table of the gear of threshold th (0, or a gear at the plan's batches: the plan's table), the gear put
// in force on it when it escalates (Table.UseGear).
func (g *Geared) For(th float64) *Table {
	t := g.base
	if gear, ok := g.p.GearAt(g.task, th); ok && th > 0 && len(gear.Batches) > 0 {
		if t = g.by[th]; t == nil {
			budget := g.budget
			if b, ok := gear.Batches[g.variant]; ok {
				budget = time.Duration(b.BudgetMs * float64(time.Millisecond))
			}
			t = ForReplica(g.spec, g.p.InGear(g.task, gear), g.policy, g.task, g.variant, budget, g.children)
			if g.prepare != nil {
				g.prepare(t)
			}
			if g.by == nil {
				g.by = map[float64]*Table{}
			}
			g.by[th] = t
		}
	}
	if th > 0 {
		t.UseGear(th)
	}
	return t
}
