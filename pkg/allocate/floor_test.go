package allocate

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

func trafficExample(t *testing.T) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestFloorUsesFewestServers: at 300 QPS on 20 servers the traffic example's hardware plan takes 17 servers at
// accuracy 0.4437; with a floor of 0.40 the plan holds the floor on fewer, and no plan holds it on one server less
// (the same floor on that many servers finds none).
func TestFloorUsesFewestServers(t *testing.T) {
	spec := trafficExample(t)
	in := Input{Spec: spec, Demand: 300, Servers: 20}
	hw, err := Solve(in, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	in.MinAccuracy = 0.40
	r, err := Solve(in, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != ModeHardware || r.SystemAccuracy < in.MinAccuracy-1e-9 || r.ServedQPS != 300 || !r.Optimal {
		t.Fatalf("mode %s, accuracy %.4f, serves %v, optimal %v: want hardware at >= 0.40, serving 300", r.Mode,
			r.SystemAccuracy, r.ServedQPS, r.Optimal)
	}
	if r.ServersUsed >= hw.ServersUsed {
		t.Fatalf("%d servers at the floor, %d in hardware mode: want fewer", r.ServersUsed, hw.ServersUsed)
	}
	fewer := in
	fewer.Servers = r.ServersUsed - 1
	less, err := Solve(fewer, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if less.Mode != ModeOverloaded || less.ServedQPS >= 300 {
		t.Errorf("on %d servers: mode %s serving %.1f QPS at the floor; want overloaded: %d is the fewest",
			fewer.Servers, less.Mode, less.ServedQPS, r.ServersUsed)
	}
	if res := r.Plan(spec.Name, 1); res.Allocation.MinAccuracy != 0.40 || res.FloorShare() != 1 {
		t.Errorf("plan's floor %v, share %v", res.Allocation.MinAccuracy, res.FloorShare())
	}
}

// TestFloorOverloaded: where the servers cannot serve the demand at the floor, the plan serves the most they serve at
// it (the max-demand step's figure), at or above the floor, and says what share of the demand that is.
func TestFloorOverloaded(t *testing.T) {
	spec := trafficExample(t)
	in := Input{Spec: spec, Demand: 700, Servers: 20, MinAccuracy: 0.40}
	r, err := Solve(in, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != ModeOverloaded || r.ServedQPS <= 0 || r.ServedQPS >= 700 || r.SystemAccuracy < 0.40-1e-9 {
		t.Fatalf("mode %s, serves %.1f, accuracy %.4f: want overloaded, serving part of 700 at >= 0.40", r.Mode,
			r.ServedQPS, r.SystemAccuracy)
	}
	// Without the floor the same servers serve all of it, less accurately.
	in.MinAccuracy = 0
	plain, err := Solve(in, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Mode != ModeAccuracy || plain.SystemAccuracy >= 0.40 {
		t.Fatalf("without the floor: mode %s at %.4f, want accuracy scaling under 0.40", plain.Mode,
			plain.SystemAccuracy)
	}
	// Just above the most it serves at the floor, it still cannot; just under, it can.
	in.MinAccuracy = 0.40
	for _, c := range []struct {
		d    float64
		mode string
	}{{r.ServedQPS * 1.01, ModeOverloaded}, {r.ServedQPS * 0.99, ModeHardware}} {
		in.Demand = c.d
		got, err := Solve(in, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got.Mode != c.mode {
			t.Errorf("at %.1f QPS: mode %s, want %s", c.d, got.Mode, c.mode)
		}
	}
	p := r.Plan(spec.Name, 1)
	if share := p.FloorShare(); share <= 0 || share >= 1 || share != r.ServedQPS/700 {
		t.Errorf("floor share %v, want %v", share, r.ServedQPS/700)
	}
	// A floor above any path's accuracy: nothing served.
	in.Demand, in.MinAccuracy = 100, 0.9
	if none, err := Solve(in, Options{Workers: 1}); err != nil || none.ServedQPS != 0 || len(none.Variants) != 0 {
		t.Errorf("floor 0.9: %+v, %v; want nothing served", none, err)
	}
	in.MinAccuracy = 1.5
	if _, err := Solve(in, Options{Workers: 1}); err == nil {
		t.Error("floor 1.5: no error")
	}
}

// TestFloorLeastCost: on priced classes the floor's plan is the cheapest that holds it: capped a cent under its cost,
// none holds the floor.
func TestFloorLeastCost(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cluster := plan.NewCluster(map[string]int{"cpu": 12, "fast": 4}, plan.Prices{"cpu": 0.4, "fast": 2.5})
	in := Input{Spec: spec, Demand: 100, Cluster: cluster, MinAccuracy: 0.40}
	r, err := Solve(in, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != ModeHardware || r.SystemAccuracy < 0.40-1e-9 {
		t.Fatalf("mode %s at %.4f: want hardware at >= 0.40", r.Mode, r.SystemAccuracy)
	}
	in.MinAccuracy = 0
	hw, err := Solve(in, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.CostPerHour >= hw.CostPerHour {
		t.Errorf("cost %.2f at the floor, %.2f at full accuracy (%s): want less", r.CostPerHour, hw.CostPerHour,
			hw.Mode)
	}
	in.MinAccuracy, in.MaxCostPerHour = 0.40, r.CostPerHour-0.01
	capped, err := Solve(in, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if capped.Mode != ModeOverloaded {
		t.Errorf("capped at %.2f: mode %s at %.4f for %.2f; want overloaded: %.2f is the least cost", in.MaxCostPerHour,
			capped.Mode, capped.SystemAccuracy, capped.CostPerHour, r.CostPerHour)
	}
}

// TestFloorGearPlan: a cascade's gear plans under a floor keep the one on the fewest servers that holds it.
func TestFloorGearPlan(t *testing.T) {
	spec := cascadeSpecFile(t)
	in := Input{Spec: spec, Demand: 100, Servers: 10, Utilization: 0.85}
	full, err := SolveCascade(in, Options{Workers: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.MinAccuracy = full.SystemAccuracy * 0.95
	r, err := SolveCascade(in, Options{Workers: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != ModeHardware || r.SystemAccuracy < in.MinAccuracy-1e-9 || r.ServersUsed > full.ServersUsed {
		t.Fatalf("mode %s, %d servers at %.4f (floor %.4f; %d servers unfloored)", r.Mode, r.ServersUsed,
			r.SystemAccuracy, in.MinAccuracy, full.ServersUsed)
	}
	plain := in
	plain.Spec = spec.WithoutCascades()
	p, err := Solve(plain, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode == ModeHardware && p.ServersUsed < r.ServersUsed {
		t.Errorf("the plain allocation holds the floor on %d servers, the gear plan took %d", p.ServersUsed,
			r.ServersUsed)
	}
}
