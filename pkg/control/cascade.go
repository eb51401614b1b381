package control

import (
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// escalationScale is, per cascade task the current plan runs, the measured escalation rate over the profiled one at
// the plan's threshold: how far the items differ from the profile's, which every other threshold is assumed to share.
// None for a task the plan runs on gears: its workers ran several thresholds, which the rate they report mixes (read
// against the plan's, it moved the traffic example's step to an accuracy-scaled plan).
func escalationScale(spec *pipeline.Spec, current *plan.Plan, measured map[string]float64) map[string]float64 {
	if current == nil || len(measured) == 0 {
		return nil
	}
	out := map[string]float64{}
	for task, th := range current.Cascades {
		t := spec.Task(task)
		rate, ok := measured[task]
		if _, geared := current.Gears[task]; t == nil || t.Cascade == nil || !ok || geared {
			continue
		}
		if profiled := t.Cascade.Level(th).Escalation; profiled > 0 {
			out[task] = rate / profiled
		}
	}
	return out
}
