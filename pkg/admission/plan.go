package admission

import (
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Of is what a gate needs of plan p of spec: the served rate and the estimate from its allocation (a static plan has
// neither), and the latency of its fastest path.
func Of(spec *pipeline.Spec, p *plan.Plan) Plan {
	var out Plan
	if a := p.Allocation; a != nil {
		out.ServedQPS, out.EstimateQPS = a.ServedQPS, a.Estimate()
	}
	for _, chain := range spec.Chains() {
		ms := 0.0
		for _, task := range chain {
			ms += fastestHosted(spec, p, task) + spec.CommLatencyMs
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
