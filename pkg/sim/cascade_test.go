package sim

import (
	"math"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestCascadeServesItsPlan: the emulated cascade example at 150 QPS on 10 servers runs classify as its cascade; its
// first variant sends on the share of items the plan's level says, the served accuracy is the plan's within a point,
// and it is more accurate than the same pipeline without its cascade, within the SLO.
func TestCascadeServesItsPlan(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run := func(s *pipeline.Spec) Summary {
		r, err := Run(Config{Spec: s, Workload: workload.Constant(150, 60*time.Second), Servers: 10, Seed: 3,
			Warmup: 20 * time.Second, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		return r.Summary
	}
	with, without := run(spec), run(spec.WithoutCascades())
	th, ok := with.Cascades["classify"]
	if !ok {
		t.Fatalf("the plan runs no cascade: %+v", with)
	}
	want := spec.Task("classify").Cascade.Level(th).Escalation
	if math.Abs(with.EscalationRatio-want) > 0.02 {
		t.Errorf("escalated %.4f of the items at threshold %v, the level says %.4f", with.EscalationRatio, th, want)
	}
	if math.Abs(with.MeanAccuracy-with.PlannedAccuracy) > 0.01 {
		t.Errorf("served accuracy %.4f, planned %.4f", with.MeanAccuracy, with.PlannedAccuracy)
	}
	if with.SLOViolationRatio > 0.01 || with.MeanAccuracy < without.MeanAccuracy+0.01 {
		t.Errorf("with the cascade: %.2f%% violations at accuracy %.4f; without: %.4f", 100*with.SLOViolationRatio,
			with.MeanAccuracy, without.MeanAccuracy)
	}
	if without.EscalationRatio != 0 || len(without.Cascades) != 0 {
		t.Errorf("without cascades: escalation %v, cascades %v", without.EscalationRatio, without.Cascades)
	}
}
