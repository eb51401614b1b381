// Reading a solution back: the hosted variants, their loads and the system accuracy, and the plan workers follow.

package allocate

import (
	"math"
	"sort"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Hosted is one hosted variant of an allocation.
type Hosted struct {
	Task        string  `json:"task"`
	Variant     string  `json:"variant"`
	Class       string  `json:"class"` // the server class it runs on (wire.ClassOf its name)
	Replicas    int     `json:"replicas"`
	BatchSize   int     `json:"batch_size"`
	LatencyMs   float64 `json:"latency_ms"`
	CapacityQPS float64 `json:"capacity_qps"`
	LoadQPS     float64 `json:"load_qps"`
}

// Result is an allocation.
type Result struct {
	Mode        string  `json:"mode"`
	Demand      float64 `json:"demand_qps"`
	Servers     int     `json:"servers"`
	ServersUsed int     `json:"servers_used"`
	// Cluster is the servers per class with their prices, absent when all are of the default class and unpriced;
	// UsedByClass the servers the allocation uses per class (absent then too), and CostPerHour their price.
	Cluster        plan.Cluster   `json:"cluster,omitempty"`
	UsedByClass    map[string]int `json:"servers_used_by_class,omitempty"`
	CostPerHour    float64        `json:"cost_per_hour"`
	SystemAccuracy float64        `json:"system_accuracy"`
	// MaxServableQPS is the largest demand these servers can serve (0 when not computed).
	MaxServableQPS float64 `json:"max_servable_qps,omitempty"`
	// ServedQPS is the demand the allocation serves: Demand, or MaxServableQPS when overloaded.
	ServedQPS float64 `json:"served_qps"`
	// Optimal says every MILP solve was proven optimal within Options.Gap; when not (a time limit), Gap is how far
	// from optimal the allocation may be.
	Optimal bool    `json:"optimal"`
	Gap     float64 `json:"gap"`
	SolveMs float64 `json:"solve_ms"`
	Nodes   int     `json:"nodes"`
	// LatencyModel is the latency model the allocation was solved with (Input.LatencyModel).
	LatencyModel LatencyModel `json:"latency_model"`
	Variants     []Hosted     `json:"variants"`
	// MinAccuracy is the floor on the system accuracy the allocation was solved with (Input.MinAccuracy; 0: none).
	// With one, mode hardware is the fewest servers at it, and overloaded the most demand served at it.
	MinAccuracy float64 `json:"min_accuracy,omitempty"`
	// Cascades is, per cascade task, the threshold its gear plan chose (SolveCascade); absent: no cascade runs.
	Cascades map[string]float64 `json:"cascades,omitempty"`
}

// read fills res from a solution.
func (m *model) read(sol milp.Result, res *Result) {
	x := sol.X
	res.Optimal = res.Optimal && sol.Status == milp.Optimal
	res.Gap = max(res.Gap, sol.Gap)
	d := x[m.demandCol]
	loads := m.loads(x)
	res.Variants = nil
	res.ServersUsed = 0
	res.Cluster = reported(m.in.cluster())
	for k, kv := range m.variants {
		for bi := range kv.batchChoiceCol {
			replicas := int(math.Round(x[kv.replicasCol[bi]]))
			if x[kv.batchChoiceCol[bi]] < 0.5 || replicas == 0 {
				continue
			}
			// Reported at full utilization, less the headroom: the routing takes its own share of it.
			capacity := kv.absorbs(bi, float64(replicas), 1) / m.in.utilization()
			res.Variants = append(res.Variants, Hosted{Task: kv.task, Variant: kv.variant.Name, Class: kv.variant.Class(), Replicas: replicas,
				BatchSize: kv.batches[bi], LatencyMs: kv.p50Ms[bi], CapacityQPS: capacity, LoadQPS: loads[k]})
			res.ServersUsed += replicas
		}
	}
	acc := 0.0
	if d > 0 {
		// In the flow columns' order, not a map's: the same sum, to the last bit, on every run.
		for _, c := range m.flows {
			acc += m.chainShare[c.path.chain] * c.path.accuracy * x[c.col] / d
		}
	} else {
		// No traffic: the accuracy of the most accurate variants, which a hardware plan hosts.
		for ci, chain := range m.chains {
			names := make([]string, len(chain))
			for i, t := range chain {
				names[i] = wire.VariantKey{Task: t, Variant: m.in.Spec.Task(t).MostAccurate().Name}.String()
			}
			acc += m.chainShare[ci] * m.in.Spec.PathAccuracyOf(names)
		}
	}
	res.SystemAccuracy = acc
	// Rounded to a billionth: a sum of prices such as 0.4 x 12 prints as 4.8, not 4.800000000000001.
	res.UsedByClass, res.CostPerHour = nil, math.Round(m.in.cluster().Cost(usedByClass(res.Variants))*1e9)/1e9
	if res.Cluster != nil {
		res.UsedByClass = usedByClass(res.Variants)
	}
	order := map[string]int{}
	for i, t := range m.in.Spec.Tasks {
		order[t.Name] = i
	}
	sort.SliceStable(res.Variants, func(i, j int) bool {
		a, b := res.Variants[i], res.Variants[j]
		if order[a.Task] != order[b.Task] {
			return order[a.Task] < order[b.Task]
		}
		return a.Variant < b.Variant
	})
}

// loads is the traffic (items/s) reaching each variant under the flows of x.
func (m *model) loads(x []float64) []float64 {
	out := make([]float64, len(m.variants))
	for _, c := range m.flows {
		for i, h := range c.path.hops {
			if c.path.chain == m.refChain[m.variants[h].task] {
				out[h] += c.path.itemsPerRequest[i] * x[c.col]
			}
		}
	}
	return out
}

// pathFlows is the traffic of each path under x (the sum over its combinations of batch sizes).
func (m *model) pathFlows(x []float64) map[*path]float64 {
	out := map[*path]float64{}
	for _, c := range m.flows {
		out[c.path] += x[c.col]
	}
	return out
}

// Plan turns an allocation into the plan workers follow (routing is computed separately).
func (r *Result) Plan(pipelineName string, epoch uint64) *plan.Plan {
	p := &plan.Plan{Pipeline: pipelineName, Epoch: epoch, Mode: r.Mode, Allocation: &plan.Allocation{
		DemandQPS: r.Demand, ServedQPS: r.ServedQPS, ClusterServers: r.Servers, ActiveServers: r.ServersUsed,
		SystemAccuracy: r.SystemAccuracy, Optimal: r.Optimal, Gap: r.Gap, SolveMs: r.SolveMs,
		LatencyModel: string(r.LatencyModel), Cluster: r.Cluster, CostPerHour: r.CostPerHour,
		MinAccuracy: r.MinAccuracy}}
	for _, h := range r.Variants {
		p.Variants = append(p.Variants, plan.VariantPlan{Task: h.Task, Variant: h.Variant, Replicas: h.Replicas,
			MaxBatch: h.BatchSize, Class: wire.ClassOf(h.Variant), BudgetMs: h.LatencyMs, CapacityQPS: h.CapacityQPS})
	}
	p.Cascades = r.Cascades
	return p
}

// reported is cluster c as results report it: nil when every server is of the default class and none is priced (a
// cluster of one kind, as before classes).
func reported(c plan.Cluster) plan.Cluster {
	if len(c) == 1 && c[0].Name == wire.DefaultClass && c[0].PricePerHour == 0 {
		return nil
	}
	return c
}
