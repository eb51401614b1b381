package control

// The allocators Loki is evaluated against (its section 6.1), so that they run through the same control loop,
// routing and deadline policies as Sleipnir's own, in the simulator and live (see Systems):
//   - InferLine: pipeline-aware hardware scaling with one fixed variant per task (the most accurate); when the
//     cluster is full it keeps them and misses deadlines;
//   - Proteus: accuracy scaling that is pipeline-agnostic: each task chooses its variants and replicas on its own,
//     from its own observed demand and a share of the servers, blind to end-to-end accuracy and to the
//     multiplicative factors; it keeps the whole cluster busy (no hardware scaling), and balances each task's load
//     over its variants in proportion to their capacity.

import (
	"fmt"
	"math"
	"sort"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// InferLine allocates the pipeline with the most accurate variant of each task only, on the fewest servers that
// serve the demand; past the cluster's capacity, the allocation of the most it can serve.
type InferLine struct {
	MILP
	fixed map[*pipeline.Spec]*pipeline.Spec
}

// NewInferLine returns InferLine's allocator; the MILP's options apply.
func NewInferLine(m MILP) *InferLine {
	return &InferLine{MILP: m, fixed: map[*pipeline.Spec]*pipeline.Spec{}}
}

// Allocate solves the allocation MILP of the pipeline restricted to its most accurate variants.
func (a *InferLine) Allocate(spec *pipeline.Spec, o Observed) (*plan.Plan, error) {
	fixed, ok := a.fixed[spec]
	if !ok {
		fixed = MostAccurateOnly(spec)
		a.fixed[spec] = fixed
	}
	return a.MILP.Allocate(fixed, o)
}

// MostAccurateOnly is a copy of spec whose tasks keep only their most accurate model, on every server class it has
// a profile for (InferLine chooses each stage's hardware).
func MostAccurateOnly(spec *pipeline.Spec) *pipeline.Spec {
	out := *spec
	out.Tasks = make([]pipeline.Task, len(spec.Tasks))
	for i, t := range spec.Tasks {
		out.Tasks[i] = t
		out.Tasks[i].Variants = nil
		best := t.MostAccurate().Model()
		for _, v := range t.Variants {
			if v.Model() == best {
				out.Tasks[i].Variants = append(out.Tasks[i].Variants, v)
			}
		}
	}
	out.PathAccuracy = nil // only paths of most accurate variants remain, and the products order them the same
	out.Allocation = nil
	return &out
}

// Proteus plans each task on its own.
type Proteus struct {
	MILP
}

// Route spreads each task's traffic over its hosted variants in proportion to their capacity: Proteus balances
// the load of each model on its own, without most-accurate-first across the pipeline.
func (Proteus) Route(in routing.Input) plan.Routing { return routing.CapacityProportional(in) }

// Allocate splits the servers between the tasks in proportion to the work their observed demand brings at their
// most accurate variant, gives each task a share of the SLO in proportion to that variant's latency along its
// chain, and solves each task as a pipeline of its own: the most accurate mix of variants that serves the task's
// demand on its servers. A task served with servers to spare gets them as more replicas of its most accurate
// hosted variant: Proteus keeps the whole cluster running.
func (a Proteus) Allocate(spec *pipeline.Spec, o Observed) (*plan.Plan, error) {
	demand := taskDemand(spec, o)
	shares := serverShares(spec, demand, o.Servers)
	if shares == nil {
		return nil, fmt.Errorf("%w: %d servers for %d tasks", ErrCannotServe, o.Servers, len(spec.Tasks))
	}
	slo := sloShares(spec)
	p := &plan.Plan{Pipeline: spec.Name, Mode: plan.ModeHardware,
		Allocation: &plan.Allocation{DemandQPS: o.Demand, ClusterServers: o.Servers, Optimal: true}}
	for i, t := range spec.Tasks {
		single := &pipeline.Spec{Name: spec.Name, SLOMs: slo[t.Name], CommLatencyMs: spec.CommLatencyMs,
			BatchSizes: spec.BatchSizes, Tasks: []pipeline.Task{{Name: t.Name, Variants: leafVariants(t)}}}
		in := allocate.Input{Spec: single, Demand: max(demand[t.Name], 1e-3), Servers: shares[i],
			Utilization: a.Utilization, LatencyModel: a.LatencyModel}
		res, err := allocate.Solve(in, allocate.Options{TimeLimit: a.TimeLimit, Workers: a.Workers})
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", t.Name, err)
		}
		if len(res.Variants) == 0 {
			return nil, fmt.Errorf("%w: task %s on %d servers", ErrCannotServe, t.Name, shares[i])
		}
		if res.Mode != plan.ModeHardware {
			p.Mode = plan.ModeAccuracy
		}
		tp := res.Plan(spec.Name, 0)
		// Spare servers go to the most accurate hosted variant.
		best := 0
		for j, v := range tp.Variants {
			if spec.Variant(t.Name, v.Variant).Accuracy > spec.Variant(t.Name, tp.Variants[best].Variant).Accuracy {
				best = j
			}
		}
		if spare := shares[i] - tp.Servers(); spare > 0 {
			vp := &tp.Variants[best]
			*vp = plan.NewVariantPlan(t.Name, spec.Variant(t.Name, vp.Variant), vp.Replicas+spare, vp.MaxBatch)
		}
		p.Variants = append(p.Variants, tp.Variants...)
		p.Allocation.SolveMs += res.SolveMs
		p.Allocation.Optimal = p.Allocation.Optimal && res.Optimal
	}
	p.Allocation.ActiveServers = p.Servers()
	return p, nil
}

// leafVariants are a task's variants as a pipeline of one task sees them: no sub-requests.
func leafVariants(t pipeline.Task) []pipeline.Variant {
	out := make([]pipeline.Variant, len(t.Variants))
	for i, v := range t.Variants {
		out[i] = v
		out[i].Fanout, out[i].Branches = nil, nil
	}
	return out
}

// taskDemand is the observed demand of each task; a task not observed yet gets the root demand times the profiled
// multiplicative factors of the most accurate variants above it (what it will see once traffic flows).
func taskDemand(spec *pipeline.Spec, o Observed) map[string]float64 {
	out := map[string]float64{}
	var walk func(task string, d float64)
	walk = func(task string, d float64) {
		if v, ok := o.TaskDemand[task]; ok {
			d = v
		}
		out[task] = d
		t := spec.Task(task)
		for _, c := range t.Children {
			walk(c, d*t.FanoutTo(t.MostAccurate(), c, nil))
		}
	}
	walk(spec.Root().Name, o.Demand)
	return out
}

// serverShares splits servers between the tasks (in spec order) in proportion to demand times the per-item time of
// the most accurate variant at its largest batch, at least one each, by largest remainder; nil when there are
// fewer servers than tasks.
func serverShares(spec *pipeline.Spec, demand map[string]float64, servers int) []int {
	n := len(spec.Tasks)
	if servers < n {
		return nil
	}
	work := make([]float64, n)
	total := 0.0
	for i, t := range spec.Tasks {
		v := t.MostAccurate()
		work[i] = max(demand[t.Name], 1e-3) / v.Throughput(spec.BatchSizes[len(spec.BatchSizes)-1])
		total += work[i]
	}
	shares := make([]int, n)
	rest := servers - n
	type frac struct {
		i int
		f float64
	}
	var fracs []frac
	given := 0
	for i := range work {
		exact := work[i] / total * float64(rest)
		shares[i] = 1 + int(math.Floor(exact))
		given += int(math.Floor(exact))
		fracs = append(fracs, frac{i, exact - math.Floor(exact)})
	}
	sort.SliceStable(fracs, func(a, b int) bool { return fracs[a].f > fracs[b].f })
	for k := 0; given < rest; k++ {
		shares[fracs[k%n].i]++
		given++
	}
	return shares
}

// sloShares gives each task a share of the SLO in proportion to its most accurate variant's latency at batch 1
// along its chain (less the chain's communication latency); a task on several chains takes its smallest share.
func sloShares(spec *pipeline.Spec) map[string]float64 {
	out := map[string]float64{}
	for _, chain := range spec.Chains() {
		sum := 0.0
		for _, task := range chain {
			sum += spec.Task(task).MostAccurate().Profile[0].P50Ms
		}
		budget := spec.SLOMs - spec.CommLatencyMs*float64(len(chain))
		for _, task := range chain {
			s := budget * spec.Task(task).MostAccurate().Profile[0].P50Ms / sum
			if cur, ok := out[task]; !ok || s < cur {
				out[task] = s
			}
		}
	}
	return out
}
