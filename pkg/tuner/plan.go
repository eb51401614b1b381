package tuner

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Observe builds a look's input from the plan in force p (the planner and the simulator alike): its hosted
// variants with what waits at each (waiting, by "task/variant"), the workers the pipeline may use (servers, per
// class), the demand estimate and the routing's utilisation.
func Observe(spec *pipeline.Spec, p *plan.Plan, waiting func(wire.VariantKey) float64, servers plan.Cluster,
	estimate, utilization float64) Input {
	return ObserveScaled(spec, p, p.BudgetScale(spec), waiting, servers, estimate, utilization)
}

// ObserveScaled is Observe with p's budget scale (plan.BudgetScale) given: a caller that looks at the same plan ten
// times a second works it out once.
func ObserveScaled(spec *pipeline.Spec, p *plan.Plan, scale float64, waiting func(wire.VariantKey) float64,
	servers plan.Cluster, estimate, utilization float64) Input {
	keys := func(i int) wire.VariantKey {
		return wire.VariantKey{Task: p.Variants[i].Task, Variant: p.Variants[i].Variant}
	}
	return ObserveInto(nil, func(i int) string { return keys(i).String() }, spec, p, scale,
		func(i int) float64 { return waiting(keys(i)) }, servers, estimate, utilization)
}

// ObserveInto is ObserveScaled with the input's variants appended to buf[:0], and each one's key ("task/variant")
// and what waits at it given by the index of its VariantPlan in p.Variants: a caller that looks ten times a
// second reuses one buffer and keeps the keys and its lookups per plan.
func ObserveInto(buf []Variant, keyOf func(i int) string, spec *pipeline.Spec, p *plan.Plan, scale float64,
	waiting func(i int) float64, servers plan.Cluster, estimate, utilization float64) Input {
	in := Input{Epoch: p.Epoch, Idle: max(0, servers.Total()-p.Servers()), Covered: true, Utilization: utilization}
	if !servers.Classless() { // a variant is lent only its own class's workers
		used := p.ServersByClass()
		in.IdleByClass = make(map[string]int, len(servers))
		for _, sc := range servers {
			in.IdleByClass[sc.Name] = max(0, sc.Servers-used[sc.Name])
		}
	}
	if a := p.Allocation; a != nil {
		in.Covered = a.DemandQPS >= estimate
	}
	in.Variants = buf[:0]
	if buf == nil {
		in.Variants = make([]Variant, 0, len(p.Variants)) // one allocation, not one per doubling
	}
	for i, vp := range p.Variants {
		if vp.Replicas <= 0 {
			continue
		}
		v := Variant{Key: keyOf(i), Replicas: vp.Replicas, MaxBatch: vp.MaxBatch, Class: wire.ClassOf(vp.Variant),
			ReplicaQPS: vp.CapacityQPS / float64(vp.Replicas),
			Budget:     time.Duration(vp.BudgetMs * scale * float64(time.Millisecond)), Waiting: waiting(i)}
		if sv := spec.Variant(vp.Task, vp.Variant); sv != nil {
			v.Accuracy = sv.Accuracy
			v.Swap = time.Duration(sv.SwapMs * float64(time.Millisecond))
		}
		in.Variants = append(in.Variants, v)
	}
	return in
}

// WithLoans is p with each variant's replicas raised by its loans: what plan.Assign places on the workers, so that
// lent workers are assigned like the plan's own, and a new plan moves as few of them as it can.
func WithLoans(p *plan.Plan, lent map[string]int) *plan.Plan {
	if len(lent) == 0 {
		return p
	}
	c := *p
	c.Variants = make([]plan.VariantPlan, len(p.Variants))
	for i, vp := range p.Variants {
		if n := lent[wire.VariantKey{Task: vp.Task, Variant: vp.Variant}.String()]; n > 0 {
			vp.CapacityQPS *= float64(vp.Replicas+n) / float64(vp.Replicas)
			vp.Replicas += n
		}
		c.Variants[i] = vp
	}
	return &c
}
