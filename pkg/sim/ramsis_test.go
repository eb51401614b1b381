package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestRAMSISRoutes: with routing_mode ramsis, the one-task car example on 8 servers at 1,200 QPS (where the
// planner hosts several EfficientNets) computes policies, its frontend chooses the root variant of most requests by
// the policy (the others came while a plan hosted one variant: no choice), and the requests are served.
func TestRAMSISRoutes(t *testing.T) {
	spec, err := pipeline.Load("../../examples/car.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec.RoutingMode, spec.ArrivalCV = routing.ModeRAMSIS, 3
	wl := workload.Constant(1200, 20*time.Second)
	wl.CV = 3
	s, err := newSim(Config{Spec: spec, Workload: wl, Servers: 8, System: "loki", Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	if s.policyErr != nil {
		t.Fatal(s.policyErr)
	}
	p := s.pipes[0]
	res := s.result(p)
	if p.rootByPolicy < int64(res.Summary.Requests)/2 {
		t.Errorf("the policy chose the root variant of %d requests of %d: want most", p.rootByPolicy,
			res.Summary.Requests)
	}
	if res.Summary.Requests == 0 || res.Summary.MeanAccuracy < 0.77 {
		t.Errorf("%d requests, mean accuracy %v", res.Summary.Requests, res.Summary.MeanAccuracy)
	}
}
