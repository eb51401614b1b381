package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestTheEdgeIsChecked: the traffic camera at 50 QPS beside the traffic example at 250 on 20 servers. The joint
// division gives the camera 4 servers, where its plan is in accuracy mode, sized for the estimate without
// headroom; the allocation MILP's plan there missed 2.2-3.1% of the camera's deadlines (Check: CheckNone), and the
// plan check of the plans at the edge (control.CheckEdge, the default) takes a plan that misses under 1%
// (docs/several-pipelines.md).
func TestTheEdgeIsChecked(t *testing.T) {
	camera, err := pipeline.Load("../../examples/traffic-camera.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunAll(Config{Pipelines: []Served{{Spec: traffic(t), Workload: workload.Constant(250, 30*time.Second)},
		{Spec: camera, Workload: workload.Constant(50, 30*time.Second)}}, Servers: 20, Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res[1].Summary.CheckChanged == 0 {
		t.Error("the check changed none of the camera's plans")
	}
	for _, r := range res {
		after := tallySeconds(r.Seconds[10:])
		t.Logf("%s: %.2f%% violations after the first 10 s, %.1f servers", r.Pipeline, 100*after.violationRatio(),
			after.servers/float64(after.n))
		if after.violationRatio() > 0.01 {
			t.Errorf("%s: %.2f%% violations after the first 10 s, want under 1%%", r.Pipeline,
				100*after.violationRatio())
		}
	}
}
