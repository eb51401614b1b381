package sim

import (
	"math"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
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

// TestGearsRunTheirBatches: under a plan whose gear table runs the cascade's variants at other max batches, a
// simulated server of the first variant batches at its own gear's (twice the plan's), and one of the next variant
// at the smallest of the gears of the items it takes (gears.MaxBatch): a message of a gear that runs it at 1 ends a
// batch of the plan's gear's, and one that begins the batch holds it to 1.
func TestGearsRunTheirBatches(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSim(Config{Spec: spec, Workload: workload.Constant(100, 3*time.Second), Servers: 10, Seed: 1,
		CommLatency: -1, Control: control.Config{Gears: true, GearBatches: true}})
	if err != nil {
		t.Fatal(err)
	}
	s.run() // to the planner's plan, served to the end
	p := s.pipes[0]
	th, on := p.plan.Cascades["classify"]
	if !on {
		t.Fatalf("the plan runs no cascade: %+v", p.plan)
	}
	c := spec.Task("classify").Cascade
	first, next := p.plan.Find("classify", c.Variants[0]), p.plan.Find("classify", c.Variants[1])
	if first == nil || next == nil || first.MaxBatch > 16 || next.MaxBatch < 2 {
		t.Fatalf("the first plan's cascade %+v, %+v: want room for larger and smaller batches", first, next)
	}
	geared := *p.plan
	geared.Gears = map[string][]plan.Gear{"classify": {
		{MaxLoad: 100, Threshold: th, Batches: map[string]plan.GearBatch{
			first.Variant: {MaxBatch: 2 * first.MaxBatch, BudgetMs: 100}}},
		{MaxLoad: 200, Threshold: th - 0.1, Batches: map[string]plan.GearBatch{next.Variant: {MaxBatch: 1, BudgetMs: 20}}},
	}}
	s.applyPlan(p, &geared, false)
	server := func(variant string) int {
		for i := range s.servers {
			if q := s.servers[i].queue; q >= 0 && s.queues[q].variant.Name == variant && !s.servers[i].busy {
				return i
			}
		}
		t.Fatalf("no idle server of %s", variant)
		return -1
	}
	batch := func(srv int, gears ...float64) int {
		sv := &s.servers[srv]
		h := s.queues[sv.queue]
		h.queue, h.head = nil, 0
		r := &request{pipe: p, due: int64(time.Minute)}
		for _, g := range gears {
			h.queue = append(h.queue, &message{req: r, items: 1, den: 1, gear: g})
		}
		s.startBatch(srv)
		n := len(sv.batch)
		sv.batch, sv.busy = sv.batch[:0], false
		return n
	}
	if got := batch(server(first.Variant), make([]float64, 40)...); got != 2*first.MaxBatch {
		t.Errorf("%s in the plan's gear: a batch of %d, want its gear's %d (the plan's %d)", first.Variant, got,
			2*first.MaxBatch, first.MaxBatch)
	}
	srv := server(next.Variant)
	if got := batch(srv, th, th, th-0.1, th, th); got != 2 {
		t.Errorf("%s: a batch of %d items before one of the gear at 1, want 2", next.Variant, got)
	}
	if got := batch(srv, th-0.1, th, th); got != 1 {
		t.Errorf("%s: a batch of %d items begun by one of the gear at 1, want 1", next.Variant, got)
	}
	if got := batch(srv, th, th, th, th, th, th, th, th, th, th); got != next.MaxBatch {
		t.Errorf("%s in the plan's gear: a batch of %d, want the plan's %d", next.Variant, got, next.MaxBatch)
	}
}
