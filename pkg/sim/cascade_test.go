package sim

import (
	"math"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestCascadeServesItsPlan: the emulated cascade example at 150 QPS on 10 servers runs classify as its cascade; its
// first variant sends on the share of items the plan's level says, the served accuracy is the plan's within a point,
// and it is more accurate than the same pipeline without its cascade, within the SLO; with gears too.
func TestCascadeServesItsPlan(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run := func(s *pipeline.Spec, geared bool) Summary {
		r, err := Run(Config{Spec: s, Workload: workload.Constant(150, 60*time.Second), Servers: 10, Seed: 3,
			Warmup: 20 * time.Second, CommLatency: -1, Control: control.Config{Gears: geared}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Summary
	}
	with, without := run(spec, false), run(spec.WithoutCascades(), false)
	// With gears, at the steady load the plan was made for, the replicas keep the plan's gear: the same share sent
	// on, the same accuracy (each leaf counted at the gear it ran at).
	geared := run(spec, true)
	if math.Abs(geared.EscalationRatio-with.EscalationRatio) > 0.02 ||
		math.Abs(geared.MeanAccuracy-geared.PlannedAccuracy) > 0.01 || geared.SLOViolationRatio > 0.01 {
		t.Errorf("with gears: %.4f sent on (%.4f without), accuracy %.4f (planned %.4f), %.2f%% violations",
			geared.EscalationRatio, with.EscalationRatio, geared.MeanAccuracy, geared.PlannedAccuracy,
			100*geared.SLOViolationRatio)
	}
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

// TestRealCascadeSentOnByItsLevels: the OCR cascade's first variant is a real model, whose confidences the
// simulator cannot draw; its items go on at the profile's measured escalation instead (levelConfidence), so that
// the served accuracy is the plan's: kept lines counted at the kept lines' accuracy and never sent on, it was 3.6
// points above the plan's on 6 servers at 2 QPS.
func TestRealCascadeSentOnByItsLevels(t *testing.T) {
	spec, err := pipeline.Load("../../examples/ocr-cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(Config{Spec: spec, Workload: workload.Constant(2, 120*time.Second), Servers: 6, Seed: 1,
		Warmup: 20 * time.Second, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary
	th, ok := s.Cascades["read_text"]
	if !ok {
		t.Fatalf("the plan runs no cascade: %+v", s)
	}
	if level := spec.Task("read_text").Cascade.Level(th).Escalation; s.EscalationRatio < level/2 {
		t.Errorf("sent on %.4f of the lines at threshold %v; the level says about %.4f", s.EscalationRatio, th, level)
	}
	if math.Abs(s.MeanAccuracy-s.PlannedAccuracy) > 0.015 {
		t.Errorf("served accuracy %.4f, planned %.4f", s.MeanAccuracy, s.PlannedAccuracy)
	}
}

// TestGearsAbsorbAStep: a step of the cascade example from 50 to 200 QPS on 10 servers. With gears, the plan at 50
// QPS is a placement for a range of load (pkg/control's gear range) and the gears take the step without a new
// placement: fewer violations than the plan's threshold alone, which re-plans at the step, as accurate (within a
// tenth of a point: the served items' noise) on no more re-plans.
func TestGearsAbsorbAStep(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run := func(geared bool) Summary {
		r, err := Run(Config{Spec: spec, Workload: workload.Stepped([]workload.Step{{QPS: 50, Duration: 40 * time.Second},
			{QPS: 200, Duration: 20 * time.Second}}), Servers: 10, Seed: 2, Warmup: 20 * time.Second, CommLatency: -1,
			Control: control.Config{Gears: geared}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Summary
	}
	on, off := run(true), run(false)
	if on.SLOViolationRatio >= off.SLOViolationRatio || on.MeanAccuracy < off.MeanAccuracy-0.001 || on.Replans > off.Replans {
		t.Errorf("with gears %.3f%% violations, accuracy %.4f, %d re-plans; without %.3f%%, %.4f, %d",
			100*on.SLOViolationRatio, on.MeanAccuracy, on.Replans, 100*off.SLOViolationRatio, off.MeanAccuracy,
			off.Replans)
	}
}
