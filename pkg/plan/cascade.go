package plan

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// checkCascades checks that each task the plan serves by its cascade has one, with a threshold in [0, 1], and
// hosts both its variants.
func (p *Plan) checkCascades(spec *pipeline.Spec) error {
	for task, th := range p.Cascades {
		t := spec.Task(task)
		if t == nil || t.Cascade == nil {
			return fmt.Errorf("cascade of %q: the pipeline declares none there", task)
		}
		if !(th >= 0 && th <= 1) {
			return fmt.Errorf("cascade of %q: threshold %v, want one in [0, 1]", task, th)
		}
		for _, v := range t.Cascade.Variants {
			if p.Find(task, v) == nil {
				return fmt.Errorf("cascade of %q: %s/%s is not hosted", task, task, v)
			}
		}
	}
	return nil
}

// staticCascades runs, in a static plan, each cascade that states its threshold and whose variants the allocation
// hosts.
func (p *Plan) staticCascades(spec *pipeline.Spec) {
	for _, t := range spec.Cascades() {
		c := t.Cascade
		if c.Threshold > 0 && p.Find(t.Name, c.Variants[0]) != nil && p.Find(t.Name, c.Variants[1]) != nil {
			if p.Cascades == nil {
				p.Cascades = map[string]float64{}
			}
			p.Cascades[t.Name] = c.Threshold
		}
	}
}

// LeafAccuracy is the end-to-end accuracy of a finished leaf's path under p: its cascade's level when it ran on a
// cascade (pipeline.Spec.CascadePathAccuracy), else the path's.
func (p *Plan) LeafAccuracy(spec *pipeline.Spec, path []string) float64 {
	if p == nil {
		return spec.PathAccuracyOf(path)
	}
	return spec.CascadePathAccuracy(path, p.Cascades)
}

// GearedLeafAccuracy is LeafAccuracy of a leaf whose cascade ran at threshold gear, a gear's (wire.ItemResult.Gear;
// 0: the plan's): its level's accuracy.
func (p *Plan) GearedLeafAccuracy(spec *pipeline.Spec, path []string, gear float64) float64 {
	if gear <= 0 || len(path) == 0 {
		return p.LeafAccuracy(spec, path)
	}
	last := path[len(path)-1]
	t, _ := spec.Lookup(last)
	if t == nil || t.Cascade == nil {
		return p.LeafAccuracy(spec, path)
	}
	th := map[string]float64{}
	if p != nil {
		maps.Copy(th, p.Cascades)
	}
	th[t.Name] = gear
	return spec.CascadePathAccuracy(path, th)
}

// checkGears checks that each gear table is of a cascade the plan runs, its thresholds in [0, 1], its loads
// increasing, and its batches of the cascade's variants, at one of the spec's batch sizes with a sane budget.
func (p *Plan) checkGears(spec *pipeline.Spec) error {
	for task, table := range p.Gears {
		if _, on := p.Cascades[task]; !on {
			return fmt.Errorf("gears of %q: the plan runs no cascade there", task)
		}
		for i, g := range table {
			if !(g.Threshold >= 0 && g.Threshold <= 1) || !(g.MaxLoad >= 0) || i > 0 && g.MaxLoad <= table[i-1].MaxLoad {
				return fmt.Errorf("gears of %q: gear %d %+v: want a threshold in [0, 1] and more load than the "+
					"gear before", task, i, g)
			}
			t := spec.Task(task)
			for v, b := range g.Batches {
				if t == nil || t.Cascade == nil || !slices.Contains(t.Cascade.Variants, v) {
					return fmt.Errorf("gears of %q: gear %d batches %q, not a variant of the cascade", task, i, v)
				}
				if !slices.Contains(spec.BatchSizes, b.MaxBatch) || !finiteNonNegative(b.BudgetMs) {
					return fmt.Errorf("gears of %q: gear %d: %s at max batch %d, budget %v ms: want one of the "+
						"batch sizes %v and a budget", task, i, v, b.MaxBatch, b.BudgetMs, spec.BatchSizes)
				}
			}
		}
	}
	return nil
}

// Equal says g and o are the same gear.
func (g Gear) Equal(o Gear) bool {
	return g.MaxLoad == o.MaxLoad && g.Threshold == o.Threshold && maps.Equal(g.Batches, o.Batches)
}

// GearAt is the gear of task's table whose threshold is threshold (ok false when none is).
func (p *Plan) GearAt(task string, threshold float64) (Gear, bool) {
	for _, g := range p.Gears[task] {
		if g.Threshold == threshold {
			return g, true
		}
	}
	return Gear{}, false
}

// InGear is p as its replicas run in gear g of task's cascade: the variants g lists at g's max batch and budget
// (the rest of p shared, not copied); p itself when g lists none. The deadline stages and the hop step built on it
// budget the cascade's stages as the gear runs them.
func (p *Plan) InGear(task string, g Gear) *Plan {
	if len(g.Batches) == 0 {
		return p
	}
	q := *p
	q.Variants = append([]VariantPlan(nil), p.Variants...)
	for i := range q.Variants {
		v := &q.Variants[i]
		if b, ok := g.Batches[v.Variant]; ok && v.Task == task {
			v.MaxBatch, v.BudgetMs = b.MaxBatch, b.BudgetMs
		}
	}
	return &q
}
