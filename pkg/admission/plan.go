package admission

import (
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Of is what a gate needs of plan p of spec: whether it hosts every task (which not), the latency of its fastest
// path, and the share of the demand it cannot serve at the pipeline's accuracy floor. (Not the rate the plan serves: the planner sizes it with headroom, and the gate admits on what the workers
// answer; docs/admission.md.)
func Of(spec *pipeline.Spec, p *plan.Plan) Plan {
	out := Plan{Hosted: true, FloorShortfall: 1 - p.FloorShare()}
	for _, chain := range spec.Chains() {
		ms := 0.0
		for _, task := range chain {
			fastest := fastestHosted(spec, p, task)
			if fastest == 0 && out.Hosted {
				out.Hosted, out.UnhostedTask = false, task
			}
			ms += fastest + spec.CommLatencyMs
		}
		out.FastestMs = max(out.FastestMs, ms)
	}
	return out
}

// fastestHosted is the p50 latency at batch 1 of task's fastest variant p hosts, by the plan's profiles where it has
// them (the profile blended with what workers measured), else the spec's; 0 when p hosts none (the request is
// refused elsewhere).
func fastestHosted(spec *pipeline.Spec, p *plan.Plan, task string) float64 {
	best := 0.0
	for _, vp := range p.Variants {
		if vp.Task != task || vp.Replicas <= 0 {
			continue
		}
		v := spec.Variant(task, vp.Variant)
		if v == nil {
			continue
		}
		ms := v.LatencyFor(1).P50Ms
		if pts := p.Profiles[wire.VariantKey{Task: task, Variant: vp.Variant}.String()]; len(pts) > 0 {
			ms = pts[0].P50Ms
		}
		if best == 0 || ms < best {
			best = ms
		}
	}
	return best
}

// OutcomeOf is the outcome of an admitted request answered with status (wire.Status*): one refused after admission,
// or answered for a reason of its own (a bad payload), is withdrawn.
func OutcomeOf(status string) Outcome {
	switch status {
	case wire.StatusOK:
		return InTime
	case wire.StatusLate, wire.StatusPartial, wire.StatusDegraded:
		return Late
	case wire.StatusDropped:
		return Dropped
	}
	return Withdrawn
}
