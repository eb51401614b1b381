package allocate

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestGearSizings: on the cascade example's plan for 100 QPS on 10 servers, the sizings at each level start with the
// plan's own batches, list each pair once, and every pair keeps the path through the cascade within its budget (its
// p50s, which the model budgets at least) and carries something; a plan without the cascade, or a task without one,
// has none.
func TestGearSizings(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Spec: spec, Demand: 100, Servers: 10, Utilization: 0.85}
	r, err := SolveCascade(in, Options{Workers: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Plan(spec.Name, 1)
	c := spec.Task("classify").Cascade
	first, next := p.Find("classify", c.Variants[0]), p.Find("classify", c.Variants[1])
	if first == nil || next == nil {
		t.Fatalf("no cascade in %+v", p.Variants)
	}
	detect := 0.0
	for _, vp := range p.Hosted(spec, "detect") {
		detect = max(detect, vp.BudgetMs)
	}
	budget := pipeline.ProcessingBudgetMs(spec.SLOMs) - 3*spec.CommLatencyMs
	for _, l := range c.Levels {
		sizings := GearSizings(in, p, "classify", l.Threshold, nil)
		if len(sizings) < 2 || sizings[0].Batch != [2]int{first.MaxBatch, next.MaxBatch} {
			t.Fatalf("threshold %v: sizings %+v, want the plan's batches (%d, %d) first and others", l.Threshold,
				sizings, first.MaxBatch, next.MaxBatch)
		}
		seen := map[[2]int]bool{}
		for _, z := range sizings {
			if seen[z.Batch] || detect+z.P50Ms[0]+z.P50Ms[1] > budget+1e-9 || z != sizings[0] && (z.Capacity[0] <= 0 || z.Capacity[1] <= 0) {
				t.Errorf("threshold %v: sizing %+v (a repeat, over the %.0f ms budget after detect's %.0f, or carrying nothing)",
					l.Threshold, z, budget, detect)
			}
			seen[z.Batch] = true
		}
	}
	if GearSizings(in, p, "detect", 0.5, nil) != nil {
		t.Error("sizings of a task without a cascade")
	}
	q := *p
	q.Cascades = nil
	if GearSizings(in, &q, "classify", 0.5, nil) != nil {
		t.Error("sizings of a plan that runs no cascade")
	}
}
