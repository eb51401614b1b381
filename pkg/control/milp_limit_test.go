package control

import (
	"encoding/json"
	"testing"
	"time"
)

// TestMILPAtItsLimitStillPlans: the live planner's allocator, its solve stopped by the time limit before its first
// LP (a nanosecond), still returns a plan for a servable demand, marked not optimal, that encodes (a gap the plan
// carries is finite): the planner publishes it rather than keeping an older plan for another demand. (An overloaded
// demand whose max-demand search finds no point in time still gets none: pkg/allocate/README.md.)
func TestMILPAtItsLimitStillPlans(t *testing.T) {
	spec := trafficSpec(t)
	for _, d := range []float64{500, 850} { // servable at the routing's 0.85 (about 960 QPS)
		p, err := MILP{Utilization: 0.85, TimeLimit: time.Nanosecond, Workers: 1}.Allocate(spec,
			Observed{Demand: d, Servers: 20})
		if err != nil {
			t.Fatalf("%v QPS: %v", d, err)
		}
		if len(p.Variants) == 0 || p.Allocation == nil || p.Allocation.Optimal || p.Allocation.ServedQPS != d {
			t.Fatalf("%v QPS: %d variants, allocation %+v; want a plan for the demand, not optimal", d, len(p.Variants),
				p.Allocation)
		}
		if _, err := json.Marshal(p); err != nil {
			t.Errorf("%v QPS: the plan does not encode: %v", d, err)
		}
	}
}
