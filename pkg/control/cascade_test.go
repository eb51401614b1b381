package control

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestEscalationScale: the measured rate over the profiled one at the threshold in force, per cascade the plan runs;
// nothing for a cascade the plan does not run or that was not measured.
func TestEscalationScale(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	profiled := spec.Task("classify").Cascade.Level(0.6).Escalation
	on := &plan.Plan{Cascades: map[string]float64{"classify": 0.6}}
	got := escalationScale(spec, on, map[string]float64{"classify": 2 * profiled})
	if math.Abs(got["classify"]-2) > 1e-12 {
		t.Errorf("scale %v, want 2", got)
	}
	if got := escalationScale(spec, &plan.Plan{}, map[string]float64{"classify": 0.5}); len(got) != 0 {
		t.Errorf("no cascade in force: %v", got)
	}
	if got := escalationScale(spec, on, nil); len(got) != 0 {
		t.Errorf("nothing measured: %v", got)
	}
}
