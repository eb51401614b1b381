// Package routing computes the routing tables of a plan. Pure: the frontend, the workers and the simulator follow
// the tables it produces.
package routing

import (
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// CapacityProportional splits each task's traffic across its hosted variants in proportion to their capacity, the
// same table for every upstream variant. It is the routing of static plans.
func CapacityProportional(spec *pipeline.Spec, p *plan.Plan) plan.Routing {
	tables := make(map[string][]plan.Route, len(spec.Tasks))
	for _, t := range spec.Tasks {
		hosted := p.Hosted(spec, t.Name)
		total := 0.0
		for _, v := range hosted {
			total += v.CapacityQPS
		}
		routes := make([]plan.Route, 0, len(hosted))
		for _, v := range hosted {
			prob := 1 / float64(len(hosted))
			if total > 0 {
				prob = v.CapacityQPS / total
			}
			routes = append(routes, plan.Route{Variant: v.Variant, Prob: prob})
		}
		tables[t.Name] = routes
	}
	r := plan.Routing{Root: tables[spec.Root().Name], Downstream: map[string]map[string][]plan.Route{}}
	for _, v := range p.Variants {
		t := spec.Task(v.Task)
		if len(t.Children) == 0 {
			continue
		}
		down := make(map[string][]plan.Route, len(t.Children))
		for _, c := range t.Children {
			down[c] = tables[c]
		}
		r.Downstream[wire.Hop(v.Task, v.Variant)] = down
	}
	return r
}
