package routing

import (
	"fmt"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// thousandWorkers are the plans of 10 pipelines on 1,000 workers (issue 48): copies of the examples traffic,
// traffic-camera, social and ocr-chain in turn, named NAME-i as the scale runs name them (tools/scale), each plan
// 100 replicas hosting every variant of every task (the most tables routing makes), at a demand that fills its root
// task's variants to 90% of what routing may give them.
type thousandWorkers struct {
	specs  []*pipeline.Spec
	plans  []*plan.Plan
	inputs []Input
}

func newThousandWorkers(b *testing.B) thousandWorkers {
	var s thousandWorkers
	examples := []string{"traffic", "traffic-camera", "social", "ocr-chain"}
	const replicas, utilization = 100, 0.85
	for i := range 10 {
		spec, err := pipeline.Load("../../examples/" + examples[i%len(examples)] + ".yaml")
		if err != nil {
			b.Fatal(err)
		}
		p := &plan.Plan{Pipeline: fmt.Sprintf("%s-%d", spec.Name, i), Epoch: 1}
		perTask := replicas / len(spec.Tasks)
		for ti, t := range spec.Tasks {
			n := perTask
			if ti == 0 {
				n += replicas - perTask*len(spec.Tasks)
			}
			for vi := range t.Variants {
				v := &t.Variants[vi]
				r := n / len(t.Variants)
				if vi < n%len(t.Variants) {
					r++
				}
				p.Variants = append(p.Variants, plan.NewVariantPlan(t.Name, v, r, largestBatch(spec, 8)))
			}
		}
		if p.Servers() != replicas {
			b.Fatalf("%s: plan has %d workers", p.Pipeline, p.Servers())
		}
		root := 0.0
		for _, vp := range p.Variants {
			if vp.Task == spec.Root().Name {
				root += vp.CapacityQPS
			}
		}
		s.specs, s.plans = append(s.specs, spec), append(s.plans, p)
		s.inputs = append(s.inputs, Input{Spec: spec, Plan: p, Demand: 0.9 * utilization * root, Utilization: utilization})
	}
	return s
}

// largestBatch is the largest of spec's batch sizes up to most.
func largestBatch(spec *pipeline.Spec, most int) int {
	out := 1
	for _, n := range spec.BatchSizes {
		if n <= most && n > out {
			out = n
		}
	}
	return out
}

// BenchmarkRoutingThousandWorkers: the routing tables of 10 pipelines' plans on 1,000 workers, as the live planner
// makes them at a tick that re-routes every pipeline (each control loop's route: MostAccurateFirst); and with the
// assignment of the 1,000 workers that follows a new plan (plan.Assign, after one plan moved 5 replicas: only those
// 5 workers change). Issue 48's target: the routing tables of 1,000 workers in under 1 ms.
func BenchmarkRoutingThousandWorkers(b *testing.B) {
	s := newThousandWorkers(b)
	tables := func() int {
		n := 0
		for _, in := range s.inputs {
			n += len(MostAccurateFirst(in).Downstream)
		}
		return n
	}
	b.Run("tables", func(b *testing.B) {
		var n int
		for b.Loop() {
			n = tables()
		}
		if n == 0 {
			b.Fatal("no downstream tables")
		}
	})
	b.Run("tables+assign", func(b *testing.B) {
		workers := make([]string, 1000)
		for i := range workers {
			workers[i] = fmt.Sprintf("up-w%03d", i)
		}
		prev, unplaced := plan.Assign(s.plans, workers, nil, nil)
		if unplaced != 0 {
			b.Fatalf("%d replicas unplaced", unplaced)
		}
		plans := append([]*plan.Plan(nil), s.plans...)
		moved := *plans[3]
		moved.Variants = append([]plan.VariantPlan(nil), moved.Variants...)
		moved.Variants[0].Replicas -= 5
		moved.Variants[1].Replicas += 5
		moved.Epoch++
		plans[3] = &moved
		var next map[string]plan.Assignment
		for b.Loop() {
			tables()
			next, _ = plan.Assign(plans, workers, nil, prev)
		}
		changed := 0
		for w, a := range next {
			if a.Key() != prev[w].Key() || a.Pipeline != prev[w].Pipeline {
				changed++
			}
		}
		if changed != 5 {
			b.Fatalf("%d workers changed variant, want the 5 of the moved replicas", changed)
		}
	})
}
