package admission

import (
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Of is what a gate needs of plan p of spec: whether it hosts every task (which not), the latency of its fastest
// path, the share of the demand it cannot serve at the pipeline's accuracy floor, and the most its variants answer
// on servers, those p reaches (plan.Plan.Reach: its replicas and the servers no plan in force uses; at least p's own
// ClusterServers). (Not the rate the plan serves: the planner sizes it with headroom, and the gate admits on what
// the workers answer; docs/admission.md.)
func Of(spec *pipeline.Spec, p *plan.Plan, servers int) Plan {
	out := Plan{Hosted: true, FloorShortfall: 1 - p.FloorShare(), Overloaded: p.Mode == plan.ModeOverloaded}
	out.CeilingQPS, out.CeilingFillMs = ceilingQPS(spec, p, servers)
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

// ceilingQPS is the most requests a second plan p's variants could answer in time on servers, the cluster's (at least
// p's Allocation.ClusterServers), which is as far as the tuner reaches by lending idle ones without a new plan: the
// servers shared among the tasks as if divisible (the LP bound), each task at its hosted variants' best rate a
// replica (CapacityQPS, in time at MaxBatch), and the items a request brings each task at their fewest (the hosted
// variants' smallest fan-out into it). An upper bound: a load above it is answered in time only after a new plan.
// 0 (no ceiling) for a plan without an allocation. fillMs is a request's time through the pipeline at that rate:
// along the slowest chain, each task's variant of that rate at its MaxBatch (BudgetMs) and each hop's communication.
func ceilingQPS(spec *pipeline.Spec, p *plan.Plan, servers int) (qps, fillMs float64) {
	a := p.Allocation
	if a == nil {
		return 0, 0
	}
	if servers = max(servers, a.ClusterServers); servers <= 0 {
		return 0, 0
	}
	perReplica := map[string]float64{} // task -> items a second one replica of its best hosted variant serves
	budget := map[string]float64{}     // task -> that variant's latency at its MaxBatch
	for _, vp := range p.Variants {
		if vp.Replicas <= 0 || vp.CapacityQPS <= 0 {
			continue
		}
		if r := vp.CapacityQPS / float64(vp.Replicas); r > perReplica[vp.Task] {
			perReplica[vp.Task], budget[vp.Task] = r, vp.BudgetMs
		}
	}
	for _, chain := range spec.Chains() {
		ms := 0.0
		for _, task := range chain {
			ms += budget[task] + spec.CommLatencyMs
		}
		fillMs = max(fillMs, ms)
	}
	items := map[string]float64{} // task -> the fewest items a request brings it
	var itemsOf func(task string) float64
	itemsOf = func(task string) float64 {
		if n, ok := items[task]; ok {
			return n
		}
		n := 1.0 // the root's
		if parent := spec.Parent(task); parent != "" {
			pt := spec.Task(parent)
			n = math.Inf(1)
			for _, vp := range p.Variants {
				if v := spec.Variant(parent, vp.Variant); vp.Task == parent && vp.Replicas > 0 && v != nil {
					n = min(n, pt.FanoutTo(v, task, p.Fanout))
				}
			}
			if math.IsInf(n, 1) {
				n = 0
			}
			n *= itemsOf(parent)
		}
		items[task] = n
		return n
	}
	serversPerQPS := 0.0
	for _, t := range spec.Tasks {
		if n := itemsOf(t.Name); n > 0 {
			if perReplica[t.Name] <= 0 {
				return 0, 0 // a task the plan does not host: refused as unhosted
			}
			serversPerQPS += n / perReplica[t.Name]
		}
	}
	if serversPerQPS <= 0 {
		return 0, 0
	}
	return float64(servers) / serversPerQPS, fillMs
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
