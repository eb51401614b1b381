package allocate

import (
	"math"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestLimitStillPlans: a solve stopped by its time limit returns the best plan it has, never an error or no plan,
// for a demand the servers can serve: not proven optimal, with a finite gap, in accuracy mode, serving the demand
// on no more than the cluster. A limit of a nanosecond stops the search before its first LP (what a live solve on a
// machine busy elsewhere can meet); 20 ms, somewhere in the search. Each example at demands past its switch point,
// under both latency models.
func TestLimitStillPlans(t *testing.T) {
	for _, c := range []struct {
		file    string
		servers int
		demands []float64
	}{
		{"../../examples/traffic.yaml", 20, []float64{550, 700, 1030}},
		{"../../examples/traffic-camera.yaml", 20, []float64{130, 640, 1300}},
		{"../../examples/ocr-chain.yaml", 6, []float64{250, 400}},
	} {
		spec, err := pipeline.Load(c.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, lm := range []LatencyModel{LatencyBurst, LatencyLoki} {
			for _, d := range c.demands {
				in := Input{Spec: spec, Demand: d, Servers: c.servers, LatencyModel: lm}
				for _, limit := range []time.Duration{time.Nanosecond, 20 * time.Millisecond} {
					checkLimitedPlan(t, in, limit)
				}
			}
		}
	}
}

// checkLimitedPlan solves in under limit and checks that the plan serves the demand.
func checkLimitedPlan(t *testing.T, in Input, limit time.Duration) {
	t.Helper()
	res, err := Solve(in, Options{TimeLimit: limit, Workers: 1})
	name := in.Spec.Name + " " + string(in.LatencyModel)
	if err != nil {
		t.Fatalf("%s at %v QPS, limit %v: %v", name, in.Demand, limit, err)
	}
	if res.Mode != ModeAccuracy || len(res.Variants) == 0 || res.ServedQPS != in.Demand {
		t.Fatalf("%s at %v QPS, limit %v: %s plan of %d variants serving %v QPS; want an accuracy plan for the demand",
			name, in.Demand, limit, res.Mode, len(res.Variants), res.ServedQPS)
	}
	if math.IsInf(res.Gap, 0) || math.IsNaN(res.Gap) || res.Optimal && res.Gap != 0 {
		t.Errorf("%s at %v QPS, limit %v: optimal %v, gap %v", name, in.Demand, limit, res.Optimal, res.Gap)
	}
	if limit == time.Nanosecond && res.Optimal {
		t.Errorf("%s at %v QPS: optimal under a limit of a nanosecond", name, in.Demand)
	}
	if res.ServersUsed > in.Servers || res.SystemAccuracy <= 0 {
		t.Errorf("%s at %v QPS, limit %v: %d servers of %d, accuracy %v", name, in.Demand, limit, res.ServersUsed,
			in.Servers, res.SystemAccuracy)
	}
	// The root task's capacity carries the demand.
	root, capacity := in.Spec.Root().Name, 0.0
	for _, h := range res.Variants {
		if h.Task == root {
			capacity += h.CapacityQPS
		}
	}
	if capacity < in.Demand*(1-1e-6) {
		t.Errorf("%s at %v QPS, limit %v: the root task's capacity is %v QPS", name, in.Demand, limit, capacity)
	}
}
