package control

import (
	"maps"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestGearRangeAbsorbsAStep: with gears, the cascade example's plan at 100 QPS on 10 servers is a placement for at
// least twice the demand, as accurate at 100 QPS as the plan for it (every variant of that plan hosted with at least
// its capacity, the same threshold), whose gears carry twice the load; a step to 200 QPS then needs no new
// placement. Without gears the same step re-plans.
func TestGearRangeAbsorbsAStep(t *testing.T) {
	spec, static, milp := cascadeExample(t)
	bare, err := milp.Allocate(spec, Observed{Demand: 115, Servers: 10}) // 100 QPS and the default headroom
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	for _, geared := range []bool{true, false} {
		l := New(spec, Config{Gears: geared}, milp, static)
		o := Observed{Demand: 100, Servers: 10}
		st := l.Next(t0, o)
		if st.Err != nil || st.Plan == nil {
			t.Fatalf("gears %v: no plan: %v", geared, st.Err)
		}
		l.Published(st, o, t0)
		p := st.Plan
		if geared {
			if !dominates(p, bare) || !maps.Equal(p.Cascades, bare.Cascades) ||
				p.Allocation.SystemAccuracy != bare.Allocation.SystemAccuracy || p.Allocation.DemandQPS < 2*115-1e-6 {
				t.Fatalf("with gears: sized for %.1f QPS at thresholds %v, accuracy %.4f, variants %+v; want at least "+
					"230 QPS holding the plan for 115 (%v, %.4f, %+v)", p.Allocation.DemandQPS, p.Cascades,
					p.Allocation.SystemAccuracy, p.Variants, bare.Cascades, bare.Allocation.SystemAccuracy, bare.Variants)
			}
			first := p.Find("classify", spec.Task("classify").Cascade.Variants[0])
			table := gears.For(spec, p, "classify", first.Variant)
			if top := table[len(table)-1].MaxLoad; top*float64(first.Replicas) < 200*2.5 {
				t.Fatalf("the fastest gear carries %.1f items/s a replica on %d, under 200 QPS's", top, first.Replicas)
			}
		}
		o.Demand = 200
		st = l.Next(t0.Add(time.Second), o)
		if st.Replanned == geared {
			t.Errorf("gears %v: a step to 200 QPS re-planned %v (trigger %q)", geared, st.Replanned, st.Trigger)
		}
	}
}

// TestGearRangeKeepsTheBaseMode: the cascade example at 93 QPS on 12 servers is planned in hardware mode; its gear
// range reaches a placement solved in accuracy mode for three times the demand planned, and the range plan, which
// serves the estimate as the plan for it does, is published in that plan's mode (hardware), not the larger demand's.
func TestGearRangeKeepsTheBaseMode(t *testing.T) {
	spec, static, milp := cascadeExample(t)
	o := Observed{Demand: 93, Servers: 12}
	l := New(spec, Config{Gears: true}, milp, static)
	st := l.Next(time.Unix(1000, 0), o)
	if st.Err != nil || st.Plan == nil {
		t.Fatalf("no plan: %v", st.Err)
	}
	bare, err := milp.Allocate(spec, Observed{Demand: l.cfg.Planned(o.Demand, false), Servers: 12})
	if err != nil {
		t.Fatal(err)
	}
	p := st.Plan
	if p.Allocation.DemandQPS <= bare.Allocation.DemandQPS*1.5 {
		t.Fatalf("range sized for %.1f QPS, the plan for the estimate %.1f: want a range", p.Allocation.DemandQPS,
			bare.Allocation.DemandQPS)
	}
	if bare.Mode != plan.ModeHardware || p.Mode != bare.Mode {
		t.Errorf("the range plan (for %.1f QPS) is in mode %s, the plan for the estimate in %s: want both hardware",
			p.Allocation.DemandQPS, p.Mode, bare.Mode)
	}
}

// cascadeExample is the cascade example, its static plan, and the MILP allocator the gear tests plan with.
func cascadeExample(t *testing.T) (*pipeline.Spec, *plan.Plan, MILP) {
	t.Helper()
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	static, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	return spec, static, MILP{Utilization: 0.85, TimeLimit: 5 * time.Second, Workers: 1}
}
