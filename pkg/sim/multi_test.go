package sim

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestSeveralPipelines: two pipelines on one cluster, each with its own workload: every request of each is
// answered, each is served by servers of its own, a run is deterministic, and a pipeline alone is run as Run runs it.
func TestSeveralPipelines(t *testing.T) {
	chain, err := pipeline.Load("../../examples/ocr-chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Pipelines: []Served{{Spec: traffic(t), Workload: workload.Constant(150, 10*time.Second)},
		{Spec: chain, Workload: workload.Constant(10, 10*time.Second)}}, Servers: 20, Seed: 1, CommLatency: -1}
	a, err := RunAll(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 2 || a[0].Pipeline != "traffic" || a[1].Pipeline != chain.Name {
		t.Fatalf("results for %d pipelines, want traffic's and %s's in order", len(a), chain.Name)
	}
	for _, r := range a {
		s := r.Summary
		if s.Requests == 0 || s.OK+s.Partial+s.Dropped+s.Late != s.Requests || s.MeanActiveServers == 0 {
			t.Errorf("%s: %+v: want every request answered, on servers of its own", r.Pipeline, s)
		}
		if s.SLOViolationRatio > 0.05 {
			t.Errorf("%s: %.2f%% violations at a light load", r.Pipeline, 100*s.SLOViolationRatio)
		}
	}
	if got := a[0].Summary.MaxActiveServers + a[1].Summary.MaxActiveServers; got > 20 {
		t.Errorf("%d servers active at most between the two, of 20", got)
	}
	b, err := RunAll(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		a[i].Summary.WallSeconds, b[i].Summary.WallSeconds, a[i].Summary.PlanSeconds, b[i].Summary.PlanSeconds = 0, 0, 0, 0
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	if _, err := Run(cfg); err == nil {
		t.Fatal("Run took two pipelines")
	}
	cfg.Pipelines = append(cfg.Pipelines, Served{Spec: chain, Workload: workload.Constant(1, time.Second)})
	if _, err := RunAll(cfg); err == nil {
		t.Fatal("a pipeline given twice was taken")
	}
}

// TestPrioritiesShedTheLowClassFirst: a high-class pipeline (traffic, class 5) whose demand grows past what it can
// serve at its most accurate on the cluster, and a low-class one (ocr-chain, class 0) at a steady 120 QPS: while
// traffic fits beside it, ocr-chain is served whole; once traffic needs every server, ocr-chain is shed (its plan
// hosts nothing) and traffic stays under 1% violations (but in the 5 s after its own step: the step of a pipeline
// alone misses a few percent there too, docs/adaptation.md).
func TestPrioritiesShedTheLowClassFirst(t *testing.T) {
	chain, err := pipeline.Load("../../examples/ocr-chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	high := traffic(t)
	high.Priority = 5
	steps, err := workload.ParseSteps("100:30s,500:30s")
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunAll(Config{Pipelines: []Served{{Spec: high, Workload: workload.Stepped(steps)},
		{Spec: chain, Workload: workload.Constant(120, 60*time.Second)}}, Servers: 20, Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	before, after := tallySeconds(res[1].Seconds[5:30]), tallySeconds(res[1].Seconds[40:])
	top := tallySeconds(append(slices.Clone(res[0].Seconds[5:30]), res[0].Seconds[35:]...))
	t.Logf("ocr-chain: %.2f%% violations beside traffic at 100 QPS, %.2f%% once traffic is at 500; traffic %.2f%%",
		100*before.violationRatio(), 100*after.violationRatio(), 100*top.violationRatio())
	if before.violationRatio() > 0.01 || after.ok > 0 || after.servers > 0 {
		t.Errorf("ocr-chain: %.2f%% violations first (want under 1%%), then %d ok on %.0f server-seconds (want shed)",
			100*before.violationRatio(), after.ok, after.servers)
	}
	if top.violationRatio() > 0.01 {
		t.Errorf("traffic, the high class: %.2f%% violations, want under 1%%", 100*top.violationRatio())
	}
}
