package tuner

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func TestWithLoansAndObserve(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Pipeline: spec.Name, Epoch: 7, Allocation: &plan.Allocation{DemandQPS: 100},
		Variants: []plan.VariantPlan{
			{Task: "detect", Variant: "yolov5x", Replicas: 2, MaxBatch: 8, BudgetMs: 190, CapacityQPS: 84},
			{Task: "classify_car", Variant: "effnet_b7", Replicas: 1, MaxBatch: 8, BudgetMs: 76, CapacityQPS: 105},
		}}
	waiting := func(k wire.VariantKey) float64 { return map[string]float64{"detect/yolov5x": 30}[k.String()] }
	in := Observe(spec, p, waiting, plan.Uniform(10), 120, 0.85)
	if in.Epoch != 7 || in.Idle != 7 || in.Covered || in.Utilization != 0.85 || len(in.Variants) != 2 {
		t.Fatalf("input %+v: want epoch 7, 7 idle of 10, not covered (120 > 100)", in)
	}
	v := in.Variants[0]
	if v.Key != "detect/yolov5x" || v.ReplicaQPS != 42 || v.Waiting != 30 || v.Accuracy <= 0 || v.Budget <= 0 {
		t.Fatalf("variant %+v", v)
	}
	lent := WithLoans(p, map[string]int{"detect/yolov5x": 3})
	if got := lent.Find("detect", "yolov5x"); got.Replicas != 5 || got.CapacityQPS != 210 {
		t.Fatalf("with 3 lent: %+v, want 5 replicas serving 210 items/s", got)
	}
	if p.Find("detect", "yolov5x").Replicas != 2 {
		t.Fatal("WithLoans changed the plan in force")
	}
	if lent.Servers() != 6 || WithLoans(p, nil) != p {
		t.Fatalf("with loans the plan keeps %d servers, want 6", lent.Servers())
	}
}
