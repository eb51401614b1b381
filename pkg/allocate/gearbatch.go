// A gear's batch sizes: the max batches a cascade's two variants may run at on a plan's placement (no model moved)
// when its first variant's items run at another threshold, as the allocation's own model budgets them.

package allocate

import (
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// GearSizing is one way a cascade's two variants may run on a placement: each at a max batch (index 0 the first
// variant, 1 the next), budgeted its p50 there, its replicas carrying Capacity (items a second at full utilization
// less the queueing headroom, as Hosted.CapacityQPS).
type GearSizing struct {
	Batch    [2]int
	P50Ms    [2]float64
	Capacity [2]float64
}

// GearSizings lists the max batches task's cascade may run at on p's placement (its replicas as they are) with its
// first variant's items at threshold (scale as SolveCascade's): every pair of batch sizes of its two variants that the
// allocation's model at that threshold (cascadeSpec: the burst rounds the replicas allow, the queueing headroom)
// keeps, whose paths through the cascade each fit their chain's budget (or take no longer than at the plan's
// batches). The plan's own batches come first; nil when the model does not list them, or p does not run the
// cascades of in's spec.
func GearSizings(in Input, p *plan.Plan, task string, threshold float64, scale map[string]float64) []GearSizing {
	tasks := in.Spec.Cascades()
	setting := make([]float64, len(tasks))
	at := -1
	for i, t := range tasks {
		th, on := p.Cascades[t.Name]
		if !on {
			return nil
		}
		setting[i] = th
		if t.Name == task {
			setting[i], at = threshold, i
		}
	}
	if at < 0 {
		return nil
	}
	names := nextTasks(in.Spec, tasks)
	g := in
	g.Spec = cascadeSpec(in.Spec, tasks, names, setting, scale)
	g.cascadeNext = map[string]bool{}
	for _, n := range names {
		g.cascadeNext[n] = true
	}
	// The plan's own step's variants and arrivals: hardware scaling hosts only the most accurate (with no floor).
	st := stepAccuracy
	if p.Mode == plan.ModeHardware && in.MinAccuracy <= 0 {
		st = stepHardware
	}
	m := newModel(g, st)
	m.keepVariants()
	c := tasks[at].Cascade
	stageTask := [2]string{task, names[at]} // the next variant is planned as a task of its own
	var stages [2][]option
	var planned [2]option
	for i, v := range c.Variants {
		vp := p.Find(task, v)
		if vp == nil {
			return nil
		}
		stages[i] = m.options(stageTask[i], v, vp.Replicas)
		o, ok := optionAt(stages[i], vp.MaxBatch)
		if !ok {
			return nil
		}
		planned[i] = o
	}
	// Every other hosted variant at the plan's batch: its latency on the paths through the cascade.
	hosted := map[string][]float64{}
	for _, vp := range p.Variants {
		if vp.Task == task {
			continue
		}
		o, ok := optionAt(m.options(vp.Task, vp.Variant, vp.Replicas), vp.MaxBatch)
		if !ok {
			return nil
		}
		hosted[vp.Task] = append(hosted[vp.Task], o.latencyMs)
	}
	// The slowest path of each chain through the cascade, with the cascade's stages left out (they add on top).
	var slowest, budgets []float64
	for ci, chain := range m.chains {
		through, lat := false, 0.0
		for _, t := range chain {
			switch {
			case t == stageTask[0] || t == stageTask[1]:
				through = true
			case len(hosted[t]) > 0:
				lat += slicesMax(hosted[t])
			}
		}
		if through {
			slowest, budgets = append(slowest, lat), append(budgets, m.chainBudgetMs[ci])
		}
	}
	fits := func(a, b option) bool {
		for i := range slowest {
			lat := slowest[i] + a.latencyMs + b.latencyMs
			if lat > max(budgets[i], slowest[i]+planned[0].latencyMs+planned[1].latencyMs)+1e-9 {
				return false
			}
		}
		return true
	}
	out := []GearSizing{sizing(planned[0], planned[1])}
	for _, a := range stages[0] {
		for _, b := range stages[1] {
			// A batch whose queueing headroom takes all its replicas' throughput carries nothing.
			if (a.batch != planned[0].batch || b.batch != planned[1].batch) && a.capacity > 0 && b.capacity > 0 &&
				fits(a, b) {
				out = append(out, sizing(a, b))
			}
		}
	}
	return out
}

// option is a variant's max batch on given replicas as the model budgets it.
type option struct {
	batch            int
	latencyMs, p50Ms float64
	capacity         float64
}

func sizing(a, b option) GearSizing {
	return GearSizing{Batch: [2]int{a.batch, b.batch}, P50Ms: [2]float64{a.p50Ms, b.p50Ms},
		Capacity: [2]float64{a.capacity, b.capacity}}
}

// options are task/variant's batch sizes the model keeps, on replicas: each at the fewest rounds of a burst those
// replicas allow (burstOptions), with their capacity as the allocation reports it (Result's).
func (m *model) options(task, variant string, replicas int) []option {
	var out []option
	for _, kv := range m.variants {
		if kv.task != task || kv.variant.Name != variant {
			continue
		}
		for bi, b := range kv.batches {
			if kv.minReplicas[bi] > float64(replicas) {
				continue
			}
			o := option{batch: b, latencyMs: kv.latencyMs[bi], p50Ms: kv.p50Ms[bi],
				capacity: kv.absorbs(bi, float64(replicas), 1) / m.in.utilization()}
			if i := optionIndex(out, b); i < 0 {
				out = append(out, o)
			} else if o.latencyMs < out[i].latencyMs {
				out[i] = o
			}
		}
	}
	return out
}

func optionIndex(os []option, batch int) int {
	for i, o := range os {
		if o.batch == batch {
			return i
		}
	}
	return -1
}

// optionAt is the option of os at batch.
func optionAt(os []option, batch int) (option, bool) {
	if i := optionIndex(os, batch); i >= 0 {
		return os[i], true
	}
	return option{latencyMs: math.Inf(1)}, false
}
