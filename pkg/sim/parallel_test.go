package sim

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestParallelBranchesGetEveryItemOnce: the simulator sends every item of a task with parallel children to each of
// them, one copy each, beside the children its fan-out splits by shares (pkg/hop/testdata/parallel.yaml, the live
// worker's test of the same name): the detector and the captioner execute exactly as many items as the image task,
// the classifier exactly twice as many, and every request completes ok. Split by shares instead, the branches' counts
// would only be about equal to the parent's.
func TestParallelBranchesGetEveryItemOnce(t *testing.T) {
	spec, err := pipeline.Load("../hop/testdata/parallel.yaml")
	if err != nil {
		t.Fatal(err)
	}
	items := runCounting(t, spec)
	n := items["img"]
	if n < 1000 || items["det"] != n || items["cap"] != n || items["cls"] != 2*n {
		t.Errorf("items executed per task %v: want det and cap as many as img, cls twice as many", items)
	}
}

// runCounting simulates spec's static allocation at 40 QPS for 30 s, checks that every request completes ok, and
// returns the items each task executed.
func runCounting(t *testing.T, spec *pipeline.Spec) map[string]uint64 {
	t.Helper()
	s, err := newSim(Config{Spec: spec, Workload: workload.Constant(40, 30*time.Second), Servers: 4,
		System: "static", Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	items := map[string]uint64{}
	for _, h := range s.queues {
		items[spec.Tasks[h.task].Name] += h.items
	}
	arrivals, ok := 0, 0
	for _, x := range s.pipes[0].seconds {
		arrivals += x.Arrivals
		ok += x.OK
	}
	if ok != arrivals {
		t.Errorf("%d of %d requests ok: every leaf of every request must complete it", ok, arrivals)
	}
	return items
}

// TestJoinRunsOnce: the simulator joins the detector's and the captioner's parts of every image into one item of the
// merge task, as the frontend does (pkg/hop/testdata/join.yaml): the merge executes as many items as the image task,
// not one per branch, and every request completes ok.
func TestJoinRunsOnce(t *testing.T) {
	text, err := os.ReadFile("../hop/testdata/join.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := pipeline.Parse([]byte(strings.ReplaceAll(string(text), "CAP_MS", "5")))
	if err != nil {
		t.Fatal(err)
	}
	items := runCounting(t, spec)
	n := items["img"]
	if n < 1000 || items["det"] != n || items["cap"] != n || items["merge"] != n {
		t.Errorf("items executed per task %v: want det, cap and merge as many as img", items)
	}
}

// TestSocialHoldsItsSLO: examples/social.yaml (parallel branches joined) on 20 servers misses under 1% of its
// requests at 10%, 50% and 90% of its hardware-mode capacity (280 QPS; docs/branches.md).
func TestSocialHoldsItsSLO(t *testing.T) {
	spec, err := pipeline.Load("../../examples/social.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, qps := range []float64{28, 140, 252} {
		res, err := Run(Config{Spec: spec, Workload: workload.Constant(qps, 40*time.Second), Warmup: 10 * time.Second,
			Servers: 20, System: "loki", Seed: 1, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		if v := res.Summary.SLOViolationRatio; v >= 0.01 {
			t.Errorf("%.0f QPS: %.2f%% violations, want under 1%%", qps, 100*v)
		}
	}
}

// TestBranchWeightsInServedAccuracy: examples/social.yaml with its branches weighed 0.9 (detect) and 0.1 (caption)
// at a demand served in hardware mode: the simulator's served accuracy is the weighted mean of the most accurate
// paths' (0.9 x 0.507 + 0.1 x 0.89 = 0.5453), as the plan's, not their even mean (0.6985).
func TestBranchWeightsInServedAccuracy(t *testing.T) {
	spec, err := pipeline.Load("../../examples/social.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec.Task("ingest").BranchWeights = map[string]float64{"detect": 0.9, "caption": 0.1}
	res, err := Run(Config{Spec: spec, Workload: workload.Constant(100, 20*time.Second), Warmup: 5 * time.Second,
		Servers: 20, System: "loki", Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	const want = 0.9*0.507 + 0.1*0.89
	if got := res.Summary.MeanAccuracy; math.Abs(got-want) > 0.002 {
		t.Errorf("served accuracy %.4f, want %.4f", got, want)
	}
	if got := res.Summary.PlannedAccuracy; math.Abs(got-want) > 0.002 {
		t.Errorf("planned accuracy %.4f, want %.4f", got, want)
	}
}
