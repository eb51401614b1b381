package hop

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// TestPolicyStep: with routing_mode ramsis, the hop step routes by the tables until the caller gives the table its
// policies, then sends each car where the car task's policy (pkg/ramsis, the same function the frontend calls)
// chooses from the queues, counting the cars this step sent on top of the reading, as the queue-aware choice does.
func TestPolicyStep(t *testing.T) {
	tb, spec := table(t, 1, false)
	spec.RoutingMode = routing.ModeRAMSIS
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.Allocation = &plan.Allocation{DemandQPS: 100}
	p.Routing = plan.Routing{Root: []plan.Route{{Variant: "d", Prob: 1}},
		Downstream: map[string]map[string][]plan.Route{"det/d": {"car": {{Variant: "c1", Prob: 1}},
			"face": {{Variant: "f1", Prob: 1}}}}}
	tab := NewTable(spec, p, tb.Stage, "det", "d", spec.Task("det").Children)
	q := &queueDepths{d: map[string]float64{"c1": 90, "c2": 0, "f1": 0}}
	tab.Queues = q
	if got := carsTo(t, new(Stepper), tab, 8); got["c1"] != 8 {
		t.Errorf("before the policies: %v, want the tables' 8 cars to c1", got)
	}
	if _, err := tab.UsePolicies(spec, p, time.Now); err != nil {
		t.Fatal(err)
	}
	ch, err := ramsis.For(spec, p, "car", time.Now)
	if err != nil || ch == nil {
		t.Fatalf("car's policy: %v, %v", ch, err)
	}
	// What the policy says for each car in turn, the cars before it counted in their variant's queue.
	want := map[string]int{}
	d := map[string]float64{"c1": 90, "c2": 0}
	left := 30*time.Millisecond - tab.Stage.Rest("car")
	for range 8 {
		v, ok := ch.Choose(itemsAt(d), "car", left, make([]time.Duration, len(ch.Options)))
		if !ok {
			t.Fatal("the policy found no queue")
		}
		want[v]++
		d[v]++
	}
	got := carsTo(t, new(Stepper), tab, 8)
	if got["c1"] != want["c1"] || got["c2"] != want["c2"] {
		t.Errorf("by policy: %v, want %v", got, want)
	}
	if want["c2"] == 0 {
		t.Errorf("the policy sent no car to c2 with 90 queued at c1 (30 ms left): %v", want)
	}
}

type itemsAt map[string]float64

func (d itemsAt) Depth(_, v string) (float64, bool) { x, ok := d[v]; return x, ok }
