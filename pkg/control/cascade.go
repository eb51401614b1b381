package control

import (
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// escalationScale is, per cascade task the current plan runs, the measured escalation rate over the profiled one at
// the plan's threshold: how far the items differ from the profile's, which every other threshold is assumed to share.
func escalationScale(spec *pipeline.Spec, current *plan.Plan, measured map[string]float64) map[string]float64 {
	if current == nil || len(measured) == 0 {
		return nil
	}
	out := map[string]float64{}
	for task, th := range current.Cascades {
		t := spec.Task(task)
		rate, ok := measured[task]
		if t == nil || t.Cascade == nil || !ok {
			continue
		}
		if profiled := t.Cascade.Level(th).Escalation; profiled > 0 {
			out[task] = rate / profiled
		}
	}
	return out
}
