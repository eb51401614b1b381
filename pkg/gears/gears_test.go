package gears

import (
	"math"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestTables: the cascade example's gear plan for 230 QPS on 10 servers (200 and the planner's headroom) runs the
// cascade at 0.6; its table has a more accurate gear (0.7) for less load, the gears in order of accuracy, each
// carrying more than the one before, and the plan's gear carries the planned load (the plan was sized for it).
func TestTables(t *testing.T) {
	spec, _, p := cascadePlan(t, 230)
	th, ok := p.Cascades["classify"]
	if !ok {
		t.Fatalf("no cascade in %v", p.Cascades)
	}
	tables := Tables(spec, p, nil, 0.85, nil)
	table := tables["classify"]
	if len(table) < 2 {
		t.Fatalf("gears %v: want at least two", table)
	}
	c := spec.Task("classify").Cascade
	first := p.Find("classify", c.Variants[0])
	load := 230 * 2.5 / float64(first.Replicas) // frames of 2.5 vehicles, per replica of the first variant
	found := false
	for i, g := range table {
		found = found || g.Threshold == th
		if i > 0 && (g.MaxLoad <= table[i-1].MaxLoad || c.Level(g.Threshold).Value() >= c.Level(table[i-1].Threshold).Value()) {
			t.Errorf("gear %d %+v after %+v: want more load, less accuracy", i, g, table[i-1])
		}
		if g.Threshold == th && g.MaxLoad < 0.85*load*(1-1e-9) { // at the routing's utilization
			t.Errorf("the plan's gear %+v carries less than its %.1f items/s", g, load)
		}
	}
	if !found || table[0].Threshold <= th {
		t.Errorf("gears %v, plan's threshold %v: want it among them, a more accurate one first", table, th)
	}
	if Tables(spec, &plan.Plan{}, nil, 0.85, nil) != nil {
		t.Error("a plan without cascades has gear tables")
	}
}

// TestSwitch: a step of the load well above what the gear carries moves to a faster gear within two windows (the
// first holds part of it), and on to the gear that carries it as the smoothed rate follows (within a second); back below, the switch
// stays until the load is Hysteresis under the more accurate gear's most, then returns.
func TestSwitch(t *testing.T) {
	table := []plan.Gear{{MaxLoad: 100, Threshold: 0.9}, {MaxLoad: 200, Threshold: 0.7}, {MaxLoad: 300, Threshold: 0.5}}
	s := NewSwitch(table, 0.9)
	t0 := time.Unix(0, 0)
	at := t0
	owed := 0.0 // items due but not yet taken, so that any rate is taken exactly on average
	run := func(rate float64, d time.Duration) {
		step := 10 * time.Millisecond
		for end := at.Add(d); at.Before(end); at = at.Add(step) {
			owed += rate * step.Seconds()
			n := math.Floor(owed)
			owed -= n
			s.Observe(at, int(n))
		}
	}
	run(50, time.Second)
	if s.Threshold() != 0.9 {
		t.Fatalf("at 50/s: threshold %v, want 0.9", s.Threshold())
	}
	up := at
	for s.Threshold() == 0.9 && at.Sub(up) < time.Second {
		run(250, 10*time.Millisecond)
	}
	t.Logf("50 to 250/s: threshold %v after %v", s.Threshold(), at.Sub(up))
	if s.Threshold() != 0.7 || at.Sub(up) > 2*Every+10*time.Millisecond {
		t.Errorf("at 250/s: threshold %v after %v, want 0.7 within two windows (a significant step)", s.Threshold(),
			at.Sub(up))
	}
	run(50, 3*time.Second)
	if s.Threshold() != 0.9 {
		t.Fatalf("back at 50/s: threshold %v, want 0.9", s.Threshold())
	}
	up = at
	for s.Threshold() != 0.5 && at.Sub(up) < time.Second {
		run(250, 10*time.Millisecond)
	}
	t.Logf("50 to 250/s: threshold 0.5 after %v", at.Sub(up))
	if s.Threshold() != 0.5 || at.Sub(up) > time.Second {
		t.Errorf("at 250/s: threshold %v after %v, want 0.5 within a second", s.Threshold(), at.Sub(up))
	}
	run(190, 2*time.Second) // fits gear 1's 200, not under its 180 less the hysteresis: stays
	if s.Threshold() != 0.5 {
		t.Errorf("at 190/s: threshold %v, want 0.5 (hysteresis)", s.Threshold())
	}
	run(170, 2*time.Second)
	if s.Threshold() != 0.7 {
		t.Errorf("at 170/s: threshold %v, want 0.7", s.Threshold())
	}
	run(95, 2*time.Second) // under gear 1's 100, not under 90: stays
	if s.Threshold() != 0.7 {
		t.Errorf("at 95/s: threshold %v, want 0.7 (hysteresis)", s.Threshold())
	}
	run(80, 2*time.Second)
	if s.Threshold() != 0.9 {
		t.Errorf("at 80/s: threshold %v, want 0.9", s.Threshold())
	}
	run(0, 0)
	s.Observe(at.Add(5*time.Second), 1) // idle: the most accurate gear
	if s.Threshold() != 0.9 {
		t.Errorf("after idling: %v", s.Threshold())
	}
}

// TestPlansGearHoldsNearCapacity: on the table the planner publishes (Utilization of the routing's 85%) for the
// cascade example's plan at 170 QPS (threshold 0.7, its second stage the bound, a faster gear after it), a steady
// load at 95% of what the placement carries at the plan's threshold keeps that threshold, as the plan alone would
// until its next plan: the gear is left only near the capacity.
func TestPlansGearHoldsNearCapacity(t *testing.T) {
	spec, _, p := cascadePlan(t, 170)
	th := p.Cascades["classify"]
	c := spec.Task("classify").Cascade
	first, next := p.Find("classify", c.Variants[0]), p.Find("classify", c.Variants[1])
	if first == nil || next == nil {
		t.Fatalf("no cascade placement in %+v", p.Variants)
	}
	capacity := min(first.CapacityQPS, next.CapacityQPS/c.Level(th).Escalation) / float64(first.Replicas)
	table := Tables(spec, p, nil, Utilization(0.85), nil)["classify"]
	if len(table) < 2 || table[len(table)-1].Threshold == th {
		t.Fatalf("gears %v, plan's threshold %v: want a faster gear after the plan's", table, th)
	}
	s := NewSwitch(table, th)
	at, owed := time.Unix(0, 0), 0.0
	for end := at.Add(5 * time.Second); at.Before(end); at = at.Add(10 * time.Millisecond) {
		owed += 0.95 * capacity * 0.01
		n := math.Floor(owed)
		owed -= n
		s.Observe(at, int(n))
		if s.Threshold() != th {
			t.Fatalf("at %.1f items/s a replica (95%% of %.1f): threshold %v after %v, want the plan's %v",
				0.95*capacity, capacity, s.Threshold(), at.Sub(time.Unix(0, 0)), th)
		}
	}
}

// TestTablesWithBatches: the cascade example's plan for 100 QPS on 10 servers runs effnet_b0 at 8 and effnet_b7 at 4
// (latency to spare: the path takes 219 of its 297 ms); with the allocation's input its gear table runs some gears
// at larger batches (its most accurate gear, effnet_b0 at 16 and effnet_b7 at 8, carries 215 items/s a replica
// against 165, more than any faster gear), each listed batch not the plan's and no slower (items a second a
// replica), every path within its budget at the gear's batches (p50s: the model budgets at least those), and each
// gear carries at least what it carries at the plan's batches, one of them more.
func TestTablesWithBatches(t *testing.T) {
	spec, in, p := cascadePlan(t, 100)
	c := spec.Task("classify").Cascade
	plain := map[float64]float64{}
	for _, g := range Tables(spec, p, nil, Utilization(0.85), nil)["classify"] {
		plain[g.Threshold] = g.MaxLoad
	}
	detect := 0.0
	for _, vp := range p.Hosted(spec, "detect") {
		detect = max(detect, vp.BudgetMs)
	}
	budget := pipeline.ProcessingBudgetMs(spec.SLOMs) - 3*spec.CommLatencyMs
	more := false
	for _, g := range Tables(spec, p, nil, Utilization(0.85), &in)["classify"] {
		path := detect
		for _, v := range c.Variants {
			vp, b := p.Find("classify", v), p.Find("classify", v).MaxBatch
			if gb, ok := g.Batches[v]; ok {
				if gb.MaxBatch == vp.MaxBatch || gb.BudgetMs != spec.Variant("classify", v).LatencyFor(gb.MaxBatch).P50Ms {
					t.Errorf("gear %v: %s at %+v, the plan's batch %d", g.Threshold, v, gb, vp.MaxBatch)
				}
				b = gb.MaxBatch
			}
			sv := spec.Variant("classify", v)
			if sv.Throughput(b) < sv.Throughput(vp.MaxBatch) {
				t.Errorf("gear %v: %s at %d serves less than at the plan's %d", g.Threshold, v, b, vp.MaxBatch)
			}
			path += sv.LatencyFor(b).P50Ms
		}
		if path > budget+1e-9 {
			t.Errorf("gear %+v: the path takes %.1f ms, over its %.1f", g, path, budget)
		}
		if was, ok := plain[g.Threshold]; ok {
			if g.MaxLoad < was*(1-1e-9) {
				t.Errorf("gear %+v carries less than at the plan's batches (%.1f)", g, was)
			}
			more = more || len(g.Batches) > 0 && g.MaxLoad > was*1.01
		}
	}
	if !more {
		t.Errorf("no gear carries more at other batches: %+v", Tables(spec, p, nil, Utilization(0.85), &in)["classify"])
	}
}

// TestMaxBatch: an item sent on under a gear runs at that gear's max batch for the variant where the gear lists one,
// else the plan's; an item with no gear at the replica's own gear's (a first variant's switch), else the plan's.
func TestMaxBatch(t *testing.T) {
	p := &plan.Plan{Cascades: map[string]float64{"classify": 0.7}, Gears: map[string][]plan.Gear{"classify": {
		{MaxLoad: 100, Threshold: 0.7},
		{MaxLoad: 200, Threshold: 0.5, Batches: map[string]plan.GearBatch{"effnet_b0": {MaxBatch: 32, BudgetMs: 117}}},
	}}}
	for _, c := range []struct {
		variant string
		gear    float64
		want    int
	}{{"effnet_b0", 0.5, 32}, {"effnet_b0", 0.7, 16}, {"effnet_b0", 0, 16}, {"effnet_b7", 0.5, 16},
		{"effnet_b0", 0.6, 16}} {
		if got := MaxBatch(p, "classify", c.variant, 16, c.gear); got != c.want {
			t.Errorf("%s at gear %v: max batch %d, want %d", c.variant, c.gear, got, c.want)
		}
	}
	sw := NewSwitch(p.Gears["classify"], 0.5)
	if got := ItemGear(0, sw); got != 0.5 {
		t.Errorf("an item with no gear at a replica in gear 0.5: %v", got)
	}
	if got := ItemGear(0.7, sw); got != 0.7 {
		t.Errorf("an item sent on at 0.7: %v", got)
	}
	if got := ItemGear(0, nil); got != 0 {
		t.Errorf("no gear anywhere: %v", got)
	}
}

// cascadePlan is the cascade example's gear plan for demand on 10 servers, and the allocation's input it was solved
// with.
func cascadePlan(t *testing.T, demand float64) (*pipeline.Spec, allocate.Input, *plan.Plan) {
	t.Helper()
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in := allocate.Input{Spec: spec, Demand: demand, Servers: 10, Utilization: 0.85}
	r, err := allocate.SolveCascade(in, allocate.Options{Workers: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return spec, in, r.Plan(spec.Name, 1)
}
