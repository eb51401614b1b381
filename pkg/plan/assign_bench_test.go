package plan

import (
	"fmt"
	"testing"
)

// BenchmarkAssignThousandWorkers: the planner's assignment of 1,000 workers to the plans of 10 pipelines (10
// variants of 10 replicas each), after one pipeline's plan moved 5 replicas between two of its variants: what a
// re-plan costs at the scale of issue 48 (target: the routing and assignment of 1,000 workers under 1 ms). It
// checks that only the workers of the moved replicas change.
func BenchmarkAssignThousandWorkers(b *testing.B) {
	var plans []*Plan
	for p := range 10 {
		pl := &Plan{Pipeline: fmt.Sprintf("pipe-%d", p), Epoch: 1}
		for v := range 10 {
			pl.Variants = append(pl.Variants, VariantPlan{Task: fmt.Sprintf("task-%d", v/3),
				Variant: fmt.Sprintf("v%d", v), Replicas: 10, MaxBatch: 8, BudgetMs: 50})
		}
		plans = append(plans, pl)
	}
	workers := make([]string, 1000)
	for i := range workers {
		workers[i] = fmt.Sprintf("worker-%04d", i)
	}
	prev, unplaced := Assign(plans, workers, nil, nil)
	if unplaced != 0 {
		b.Fatalf("%d replicas unplaced", unplaced)
	}
	moved := *plans[3]
	moved.Variants = append([]VariantPlan(nil), moved.Variants...)
	moved.Variants[0].Replicas -= 5
	moved.Variants[1].Replicas += 5
	plans[3] = &moved
	var next map[string]Assignment
	for b.Loop() {
		next, _ = Assign(plans, workers, nil, prev)
	}
	changed := 0
	for w, a := range next {
		if a != prev[w] {
			changed++
		}
	}
	if changed != 5 {
		b.Fatalf("%d workers changed variant, want the 5 of the moved replicas", changed)
	}
}
