package routing

import (
	"sort"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Input is what most-accurate-first routes by.
type Input struct {
	Spec *pipeline.Spec
	Plan *plan.Plan
	// Demand is the estimated requests per second at the root.
	Demand float64
	// Fanout optionally overrides a variant's multiplicative factor ("task/variant" -> factor), e.g. with what its
	// workers observe; variants not listed use the spec's.
	Fanout map[string]pipeline.Fanout
	// Utilization is the share of each variant's capacity the routing fills before it moves on to the next most
	// accurate one; 0 means 1 (the paper's "up to their capacity"). Below 1 leaves room for bursts: a queue fed at
	// its full service rate grows without bound.
	Utilization float64
}

// MostAccurateFirst is Loki's routing (algorithm 1): from the root down, each task's demand fills its hosted variants
// in order of accuracy, each up to its capacity; a variant's outgoing demand is what it was given times its
// multiplicative factor and the child's share. Sleipnir's replicas of a variant share one subject, so there is one
// table per hosted variant and child task rather than per worker. Two cases the paper leaves open:
//   - demand beyond a task's total capacity is spread over its variants in proportion to their capacity, so every
//     table sums to 1 and overload lands where there is the most room;
//   - a variant with no estimated traffic still gets a table (traffic may come): the most accurate child variant
//     with capacity left, or, with none left, all of them in proportion to capacity; so does every variant the plan
//     does not host (a batch started under the previous plan may finish under this one).
//
// Backup lists, per task, the variants with capacity left over, most accurate first, for opportunistic rerouting.
func MostAccurateFirst(in Input) plan.Routing {
	util := in.Utilization
	if util <= 0 || util > 1 {
		util = 1
	}
	spec := in.Spec
	hosted, left := hostedByAccuracy(in, util)
	entry := cascadeEntries(spec, in.Plan, hosted)

	incoming := make(map[string]float64, len(left))
	root := spec.Root()
	r := plan.Routing{Downstream: map[string]map[string][]plan.Route{}}
	r.Root = fill(entry[root.Name], in.Demand, left, incoming)

	// Tasks in breadth-first order, so every variant's incoming demand is known before its table is made.
	queue := []*pipeline.Task{root}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		if len(t.Children) == 0 {
			continue
		}
		for _, u := range hosted[t.Name] {
			tables := make(map[string][]plan.Route, len(t.Children))
			for _, child := range t.Children {
				out := incoming[u.key] * t.FanoutTo(u.variant, child, in.Fanout)
				if j := spec.Task(child); j.Join != nil {
					// Each parent sends the join every item; the frontend joins them into one.
					out /= float64(len(spec.Parents(child)))
				}
				tables[child] = fill(entry[child], out, left, incoming)
			}
			r.Downstream[u.key] = tables
		}
		for _, child := range t.Children {
			if c := spec.Task(child); c.Join == nil || spec.Parents(child)[0] == t.Name { // a join once
				queue = append(queue, c)
			}
		}
	}
	// Variants the plan does not host get tables too, as if no traffic were estimated for them: a batch started
	// under the previous plan may finish after this one retired its variant, and its sub-requests must go on.
	addUnhostedTables(spec, r.Downstream, entry, left, incoming)
	reserveEscalations(spec, in.Plan, hosted, left, incoming)
	r.Backup = backupLists(hosted, left)
	return r
}

// hostedByAccuracy are the plan's hosted variants of each task, most accurate first, and the capacity of each (by
// key) routing may fill.
func hostedByAccuracy(in Input, util float64) (hosted map[string][]candidate, left map[string]float64) {
	spec := in.Spec
	hosted = make(map[string][]candidate, len(spec.Tasks)) // task -> hosted variants, most accurate first
	left = make(map[string]float64, len(in.Plan.Variants)) // key -> capacity not yet routed to
	for _, vp := range in.Plan.Variants {
		v := spec.Variant(vp.Task, vp.Variant)
		if v == nil {
			continue
		}
		key := wire.VariantKey{Task: vp.Task, Variant: vp.Variant}.String()
		hosted[vp.Task] = append(hosted[vp.Task], candidate{key: key, name: vp.Variant, variant: v, plan: vp})
		left[key] += vp.CapacityQPS * util
	}
	for _, cs := range hosted {
		sort.Slice(cs, func(i, j int) bool {
			if cs[i].variant.Accuracy != cs[j].variant.Accuracy {
				return cs[i].variant.Accuracy > cs[j].variant.Accuracy
			}
			return cs[i].name < cs[j].name
		})
	}
	return hosted, left
}

// addUnhostedTables gives every variant of spec without a table in downstream (one the plan does not host) tables
// with no traffic estimated.
func addUnhostedTables(spec *pipeline.Spec, downstream map[string]map[string][]plan.Route,
	hosted map[string][]candidate, left, incoming map[string]float64) {
	for ti := range spec.Tasks {
		t := &spec.Tasks[ti]
		if len(t.Children) == 0 {
			continue
		}
		for _, v := range t.Variants {
			key := wire.VariantKey{Task: t.Name, Variant: v.Name}.String()
			if _, ok := downstream[key]; ok {
				continue
			}
			tables := make(map[string][]plan.Route, len(t.Children))
			for _, child := range t.Children {
				tables[child] = fill(hosted[child], 0, left, incoming)
			}
			downstream[key] = tables
		}
	}
}

// backupLists are, per task, the hosted variants with capacity left over, most accurate first.
func backupLists(hosted map[string][]candidate, left map[string]float64) map[string][]plan.Backup {
	backup := map[string][]plan.Backup{}
	for task, cs := range hosted {
		for _, c := range cs {
			if l := left[c.key]; l > 0 {
				backup[task] = append(backup[task], plan.Backup{Variant: c.name, LeftoverQPS: l,
					LatencyMs: c.plan.BudgetMs, Accuracy: c.variant.Accuracy})
			}
		}
	}
	return backup
}

type candidate struct {
	key     string
	name    string
	variant *pipeline.Variant
	plan    plan.VariantPlan
}

// fill routes demand over candidates, most accurate first, taking from left and adding to incoming.
func fill(cs []candidate, demand float64, left, incoming map[string]float64) []plan.Route {
	if len(cs) == 0 {
		return nil
	}
	routes := make([]plan.Route, 0, len(cs))
	if demand <= 0 {
		for _, c := range cs {
			if left[c.key] > 0 {
				return append(routes, plan.Route{Variant: c.name, Prob: 1})
			}
		}
		for i, share := range capacityShares(cs) {
			routes = append(routes, plan.Route{Variant: cs[i].name, Prob: share})
		}
		return routes
	}
	remaining := demand
	for _, c := range cs {
		take := min(remaining, left[c.key])
		if take <= 0 {
			continue
		}
		left[c.key] -= take
		incoming[c.key] += take
		remaining -= take
		routes = append(routes, plan.Route{Variant: c.name, Prob: take / demand})
	}
	if remaining <= 1e-12*demand {
		return routes
	}
	// Overload: the excess goes to every variant in proportion to its capacity.
	for i, share := range capacityShares(cs) {
		extra := remaining * share
		incoming[cs[i].key] += extra
		routes = addProb(routes, cs[i].name, extra/demand)
	}
	return routes
}

// capacityShares is each candidate's share of their total capacity (equal shares if none has any).
func capacityShares(cs []candidate) []float64 {
	total := 0.0
	for _, c := range cs {
		total += c.plan.CapacityQPS
	}
	shares := make([]float64, len(cs))
	for i, c := range cs {
		shares[i] = 1 / float64(len(cs))
		if total > 0 {
			shares[i] = c.plan.CapacityQPS / total
		}
	}
	return shares
}

func addProb(routes []plan.Route, variant string, p float64) []plan.Route {
	for i := range routes {
		if routes[i].Variant == variant {
			routes[i].Prob += p
			return routes
		}
	}
	return append(routes, plan.Route{Variant: variant, Prob: p})
}
