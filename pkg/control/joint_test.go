package control

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestJointMILP: the joint allocator gives traffic (300 QPS) and ocr-chain (20 QPS) one plan each, named for its
// pipeline, on 20 servers in all, traffic's more accurate than its plan on an even split's 10; one pipeline alone
// gets the plan MILP gives it.
func TestJointMILP(t *testing.T) {
	traffic := trafficSpec(t)
	ocr, err := pipeline.Load("../../examples/ocr-chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	single := MILP{Utilization: 0.85, TimeLimit: 5 * time.Second, Workers: 1}
	joint := JointMILP{MILP: single}
	plans, res, err := joint.Allocate([]JointPipeline{{Spec: traffic, Observed: Observed{Demand: 300}},
		{Spec: ocr, Observed: Observed{Demand: 20}}}, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 2 || plans[0] == nil || plans[1] == nil || plans[0].Pipeline != "traffic" ||
		plans[1].Pipeline != "ocr-chain" {
		t.Fatalf("plans %+v", plans)
	}
	used := plans[0].Allocation.ActiveServers + plans[1].Allocation.ActiveServers
	if used > 20 || used != res.ServersUsed {
		t.Errorf("%d servers in the plans, %d in the joint result, of 20", used, res.ServersUsed)
	}
	half, err := single.Allocate(traffic, Observed{Demand: 300, Servers: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got, even := plans[0].Allocation.SystemAccuracy, half.Allocation.SystemAccuracy; got <= even {
		t.Errorf("traffic at %.4f jointly, %.4f on an even split", got, even)
	}
	alone, err := single.Allocate(traffic, Observed{Demand: 600, Servers: 20})
	if err != nil {
		t.Fatal(err)
	}
	plans, _, err = joint.Allocate([]JointPipeline{{Spec: traffic, Observed: Observed{Demand: 600}}}, 20)
	if err != nil {
		t.Fatal(err)
	}
	plans[0].Allocation.SolveMs, alone.Allocation.SolveMs = 0, 0
	if math.Abs(plans[0].Allocation.SystemAccuracy-alone.Allocation.SystemAccuracy) < 1e-9 { // summed in another order
		plans[0].Allocation.SystemAccuracy = alone.Allocation.SystemAccuracy
	}
	if !reflect.DeepEqual(plans[0], alone) {
		t.Errorf("one pipeline: joint plan %+v (%+v), MILP's %+v (%+v)", plans[0], *plans[0].Allocation, alone,
			*alone.Allocation)
	}
}
