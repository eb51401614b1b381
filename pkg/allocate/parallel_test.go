package allocate

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestParallelBranchDemand: a parallel branch's demand is its parent's items, not a share of them. In
// pkg/hop/testdata/parallel.yaml every image goes to the detector and to the captioner (one copy each) and 2 crops
// of it to the classifier: at 1000 QPS the plan carries 1000 items/s to each branch and 2000 to the classifier, and
// hosts the capacity for them. Read as a split of the image task's fan-out, the branches would get none.
func TestParallelBranchDemand(t *testing.T) {
	spec, err := pipeline.Load("../hop/testdata/parallel.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const demand = 1000.0
	res, err := Solve(Input{Spec: spec, Demand: demand, Servers: 20, Utilization: 0.85}, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"img": demand, "det": demand, "cap": demand, "cls": 2 * demand}
	got := map[string]float64{}
	capacity := map[string]float64{}
	for _, h := range res.Variants {
		got[h.Task] += h.LoadQPS
		capacity[h.Task] += h.CapacityQPS
	}
	for task, w := range want {
		if math.Abs(got[task]-w) > 1e-6*w {
			t.Errorf("%s: load %.1f items/s, want %.0f", task, got[task], w)
		}
		if capacity[task] < w {
			t.Errorf("%s: capacity %.1f items/s for a load of %.0f", task, capacity[task], w)
		}
	}
}
