// Package routing computes the routing tables of a plan. Pure: the planner publishes what it computes, the frontend,
// the workers and the simulator follow it.
package routing

import (
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// CapacityProportional is a pipeline-agnostic load balancer (Proteus's, applied per task): every task's traffic
// is spread over its hosted variants in proportion to their capacity, whatever their accuracy and whatever the
// demand, and no variant is kept as a backup.
func CapacityProportional(in Input) plan.Routing {
	hosted := map[string][]candidate{}
	for _, vp := range in.Plan.Variants {
		if v := in.Spec.Variant(vp.Task, vp.Variant); v != nil {
			hosted[vp.Task] = append(hosted[vp.Task], candidate{name: vp.Variant, variant: v, plan: vp})
		}
	}
	table := func(task string) []plan.Route {
		cs := hosted[task]
		var routes []plan.Route
		for i, share := range capacityShares(cs) {
			routes = append(routes, plan.Route{Variant: cs[i].name, Prob: share})
		}
		return routes
	}
	r := plan.Routing{Root: table(in.Spec.Root().Name), Downstream: map[string]map[string][]plan.Route{}}
	// The same tables for every variant of a task (they ignore where traffic comes from), hosted or not: a batch
	// started under the previous plan may finish under this one. Read-only, so the variants share them.
	for ti := range in.Spec.Tasks {
		t := &in.Spec.Tasks[ti]
		if len(t.Children) == 0 {
			continue
		}
		tables := make(map[string][]plan.Route, len(t.Children))
		for _, c := range t.Children {
			tables[c] = table(c)
		}
		for _, v := range t.Variants {
			r.Downstream[wire.VariantKey{Task: t.Name, Variant: v.Name}.String()] = tables
		}
	}
	return r
}
