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

// TestBranchWeightsSteerTheAccuracy: the social example at twice its hardware-mode capacity, its branches weighed
// 0.9/0.1 and then 0.1/0.9 (pipeline.Task.BranchWeights). The plan's system accuracy is the weighted mean of its
// branches' accuracies, and the accuracy step spends the servers on the branch that weighs more: its served
// accuracy is higher than when it weighs less. Without the weights in the chain shares both plans are one.
func TestBranchWeightsSteerTheAccuracy(t *testing.T) {
	branchAccuracy := func(w map[string]float64) map[string]float64 {
		spec := loadSpec(t, "social.yaml", 0)
		spec.Task("ingest").BranchWeights = w
		res, err := Solve(Input{Spec: spec, Demand: 560, Servers: 20, Utilization: 0.85}, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Mode != ModeAccuracy {
			t.Fatalf("mode %s, want %s", res.Mode, ModeAccuracy)
		}
		// Each branch's accuracy: its task's variants weighted by the load the plan brings them.
		acc := map[string]float64{}
		for _, task := range []string{"detect", "caption"} {
			load, sum := 0.0, 0.0
			for _, h := range res.Variants {
				if h.Task == task {
					_, v := spec.Lookup(task + "/" + h.Variant)
					load += h.LoadQPS
					sum += h.LoadQPS * v.Accuracy
				}
			}
			acc[task] = sum / load
		}
		if want := w["detect"]*acc["detect"] + w["caption"]*acc["caption"]; math.Abs(res.SystemAccuracy-want) > 1e-6 {
			t.Errorf("weights %v: system accuracy %.5f, want the weighted mean of the branches' %.5f", w,
				res.SystemAccuracy, want)
		}
		t.Logf("weights %v: detect %.4f, caption %.4f, system %.4f", w, acc["detect"], acc["caption"],
			res.SystemAccuracy)
		return acc
	}
	detectFirst := branchAccuracy(map[string]float64{"detect": 0.9, "caption": 0.1})
	captionFirst := branchAccuracy(map[string]float64{"detect": 0.1, "caption": 0.9})
	if !(detectFirst["detect"] > captionFirst["detect"] && captionFirst["caption"] > detectFirst["caption"]) {
		t.Errorf("the weightier branch did not get the more accurate variants: %v weighing detect, %v caption",
			detectFirst, captionFirst)
	}
}
