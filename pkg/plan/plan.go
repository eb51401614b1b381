// Package plan holds the allocation plan the planner publishes and the workers and frontends follow: which variants
// are hosted, with how many replicas and which maximum batch size, each task's latency budget, the routing tables,
// and which worker runs which variant. Pure: no NATS.
package plan

import (
	"fmt"
	"sort"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Modes of a plan.
const (
	ModeStatic = "static" // taken from the spec's allocation section
	// The allocation MILP's modes (pkg/allocate).
	ModeHardware   = "hardware"   // the most accurate variants on the fewest servers (with min_accuracy: the fewest at it)
	ModeAccuracy   = "accuracy"   // the cluster is full: some tasks run faster, less accurate variants
	ModeOverloaded = "overloaded" // not even the fastest variants serve the demand: the plan serves what it can
)

// Plan is the value of wire.PlanKey(pipeline) in the KV bucket (JSON).
type Plan struct {
	Pipeline string `json:"pipeline"`
	// Epoch increases with every plan the planner publishes for the pipeline.
	Epoch    uint64        `json:"epoch"`
	Mode     string        `json:"mode"`
	Variants []VariantPlan `json:"variants"`
	Routing  Routing       `json:"routing"`
	// Fanout holds the multiplicative factors ("task/variant" -> factor) that workers measured and the planner used
	// in place of the profile's; variants not listed use their profile's.
	Fanout map[string]pipeline.Fanout `json:"fanout,omitempty"`
	// Profiles holds the latency profiles ("task/variant" -> one point per batch size) the planner planned and
	// routed with in place of the spec's: the profile blended with the batch latencies workers measured
	// (pkg/latency); variants not listed use the spec's.
	Profiles map[string][]pipeline.ProfilePoint `json:"profiles,omitempty"`
	// Cascades is, per task served by its cascade (pipeline.Cascade), the first variant's confidence threshold: its
	// items below it are sent on to the next variant. A cascade task not listed is routed as any other.
	Cascades map[string]float64 `json:"cascades,omitempty"`
	// Gears is, per task of Cascades, the gear table of the plan's placement (pkg/gears): the threshold for each
	// range of load, most accurate first, which the cascade's first variant's workers switch between as their
	// measured load moves; absent, Cascades' threshold holds until the next plan.
	Gears map[string][]Gear `json:"gears,omitempty"`
	// Allocation says what the allocation MILP was solved for and what it found; absent from static plans.
	Allocation *Allocation `json:"allocation,omitempty"`
}

// Gear is one row of a cascade's gear table: up to MaxLoad items a second per replica of the cascade's first
// variant, its items run at Threshold, and the cascade's variants listed in Batches at the max batch (and budget)
// given there in place of the plan's (absent: every variant at the plan's).
type Gear struct {
	MaxLoad   float64              `json:"max_load"`
	Threshold float64              `json:"threshold"`
	Batches   map[string]GearBatch `json:"batches,omitempty"`
}

// GearBatch is a cascade variant's max batch in a gear, and its budget there: its p50 latency at MaxBatch (as
// VariantPlan's).
type GearBatch struct {
	MaxBatch int     `json:"max_batch"`
	BudgetMs float64 `json:"budget_ms"`
}

// Allocation describes how a plan's variants were chosen by the allocation MILP (pkg/allocate).
type Allocation struct {
	// DemandQPS is the demand planned for; ServedQPS what the plan serves (less when overloaded).
	DemandQPS float64 `json:"demand_qps"`
	ServedQPS float64 `json:"served_qps"`
	// EstimateQPS is the demand estimate the plan was made from: DemandQPS less the planner's headroom
	// (control.Config.Headroom). 0 in plans from before it was recorded: see Estimate.
	EstimateQPS float64 `json:"estimate_qps,omitempty"`
	// ClusterServers is how many workers the planner could use; ActiveServers how many the plan uses (the others
	// idle).
	ClusterServers int `json:"cluster_servers"`
	ActiveServers  int `json:"active_servers"`
	// Cluster is the servers the planner could use, per class with its price; absent when every server is of the
	// default class and none is priced.
	Cluster Cluster `json:"cluster,omitempty"`
	// CostPerHour is the hourly price of the servers the plan uses (Cluster's prices; 0 when none is priced).
	CostPerHour float64 `json:"cost_per_hour"`
	// SystemAccuracy is the end-to-end accuracy the plan expects at DemandQPS.
	SystemAccuracy float64 `json:"system_accuracy"`
	// Optimal says the solver proved the plan optimal; otherwise it stopped at its time limit and Gap bounds how
	// far from optimal the plan may be.
	Optimal bool    `json:"optimal"`
	Gap     float64 `json:"gap"`
	SolveMs float64 `json:"solve_ms"`
	// LatencyModel is the allocation MILP's latency model: "burst" or "loki" (pkg/allocate.LatencyModel); absent
	// from older plans, which are burst.
	LatencyModel string `json:"latency_model,omitempty"`
	// Check is what the plan check predicted for the plan (pkg/control.Checked); absent when no check ran.
	Check *CheckResult `json:"check,omitempty"`
	// MinAccuracy is the floor on the system accuracy the plan was solved with (the spec's min_accuracy); absent:
	// none. With one, an overloaded plan serves ServedQPS at the floor, and the frontends refuse the rest (FloorShare).
	MinAccuracy float64 `json:"min_accuracy,omitempty"`
}

// FloorShare is the share of the demand the plan serves at its accuracy floor: ServedQPS over DemandQPS when the plan
// has a floor and is overloaded (the servers cannot serve the demand at it; the frontends refuse the rest), else 1.
func (p *Plan) FloorShare() float64 {
	a := p.Allocation
	if a == nil || a.MinAccuracy <= 0 || p.Mode != ModeOverloaded || a.DemandQPS <= 0 {
		return 1
	}
	return max(0, min(1, a.ServedQPS/a.DemandQPS))
}

// CheckResult is what simulating a plan on the observed traffic predicted before it was published.
type CheckResult struct {
	// ViolationRatio is the share of the simulated requests not answered ok.
	ViolationRatio float64 `json:"violation_ratio"`
	// Candidates is how many plans were checked to choose this one (1: the allocator's first).
	Candidates int `json:"candidates"`
	// Changed says the plan is not the one the allocator first returned: the check tightened it, or took the
	// more accurate one.
	Changed bool `json:"changed,omitempty"`
	// Poisson says no arrivals were observed: the check drew Poisson arrivals at the demand.
	Poisson bool `json:"poisson,omitempty"`
}

// Estimate is the demand estimate the plan was made from (EstimateQPS, or DemandQPS when it was not recorded): a
// restarted planner starts its estimate there, not at the headroom's larger demand.
func (a *Allocation) Estimate() float64 {
	if a.EstimateQPS > 0 {
		return a.EstimateQPS
	}
	return a.DemandQPS
}

// VariantPlan is one hosted variant.
type VariantPlan struct {
	Task     string `json:"task"`
	Variant  string `json:"variant"`
	Replicas int    `json:"replicas"`
	MaxBatch int    `json:"max_batch"`
	// Class is the server class the variant's replicas run on: the one its name says (wire.ClassOf), spelled out
	// for people reading the plan.
	Class string `json:"class"`
	// BudgetMs is the task's latency budget on this variant: its profiled p50 latency at MaxBatch.
	BudgetMs float64 `json:"budget_ms"`
	// CapacityQPS is the items per second its replicas serve at MaxBatch.
	CapacityQPS float64 `json:"capacity_qps"`
}

// Routing says where sub-requests go: Root for the frontend, Downstream per upstream variant ("task/variant"; every
// variant of a task with children, hosted or not, since a batch may finish after a new plan retired its variant)
// and child task. Backup lists, per task, the hosted variants with capacity left over after the
// routing, for workers to reroute late items to.
type Routing struct {
	Root       []Route                       `json:"root"`
	Downstream map[string]map[string][]Route `json:"downstream"`
	Backup     map[string][]Backup           `json:"backup,omitempty"`
}

// Backup is a hosted variant with spare capacity.
type Backup struct {
	Variant     string  `json:"variant"`
	LeftoverQPS float64 `json:"leftover_qps"`
	// LatencyMs is its profiled latency at the plan's max batch (its budget).
	LatencyMs float64 `json:"latency_ms"`
	Accuracy  float64 `json:"accuracy"`
}

// Route sends a share Prob of a task's traffic to one of its variants.
type Route struct {
	Variant string  `json:"variant"`
	Prob    float64 `json:"prob"`
}

// Pick returns the variant whose cumulative probability first exceeds u in [0, 1); "" when routes is empty.
func Pick(routes []Route, u float64) string {
	acc := 0.0
	for _, r := range routes {
		acc += r.Prob
		if u < acc {
			return r.Variant
		}
	}
	if len(routes) == 0 {
		return ""
	}
	return routes[len(routes)-1].Variant
}

// Servers is the number of workers the plan keeps busy.
func (p *Plan) Servers() int {
	n := 0
	for _, v := range p.Variants {
		n += v.Replicas
	}
	return n
}

// HostsNothing says the plan gives the pipeline no server: its frontends refuse its requests at once (counted as
// demand, so that the planner gives it servers), its workers serve it nothing.
func (p *Plan) HostsNothing() bool { return p.Servers() == 0 }

// ServersByClass is the number of workers the plan keeps busy, per server class.
func (p *Plan) ServersByClass() map[string]int {
	out := map[string]int{}
	for _, v := range p.Variants {
		out[wire.ClassOf(v.Variant)] += v.Replicas
	}
	return out
}

// Find returns the plan of one variant, or nil when it is not hosted.
func (p *Plan) Find(task, variant string) *VariantPlan {
	for i := range p.Variants {
		if p.Variants[i].Task == task && p.Variants[i].Variant == variant {
			return &p.Variants[i]
		}
	}
	return nil
}

// Upstream is the hop a message whose path (the hops its items went through, wire.HeaderPath) is path came from:
// the last of them; "" for a message at the root task.
func Upstream(path []string) string {
	if len(path) == 0 {
		return ""
	}
	return path[len(path)-1]
}

// Rehome is where a message queued at task/variant goes when p hosts no replica of that variant (a plan retired it
// while the message waited): the variant p routes the task's traffic to from upstream, the message's previous hop
// ("task/variant", or "" at the root task: see Upstream), drawn with u in [0, 1). "" when p hosts task/variant, or routes the task
// nowhere from upstream: the message stays.
func (p *Plan) Rehome(task, variant, upstream string, u float64) string {
	if p.Hosts(task, variant) {
		return ""
	}
	routes := p.Routing.Root
	if upstream != "" {
		routes = p.Routing.Downstream[upstream][task]
	}
	if to := Pick(routes, u); to != variant {
		return to
	}
	return ""
}

// Hosts says p runs replicas of task/variant.
func (p *Plan) Hosts(task, variant string) bool {
	vp := p.Find(task, variant)
	return vp != nil && vp.Replicas > 0
}

// Hosted returns the hosted variants of one task, most accurate first.
func (p *Plan) Hosted(spec *pipeline.Spec, task string) []VariantPlan {
	var out []VariantPlan
	for _, v := range p.Variants {
		if v.Task == task {
			out = append(out, v)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return spec.Variant(task, out[i].Variant).Accuracy > spec.Variant(task, out[j].Variant).Accuracy
	})
	return out
}

// NewVariantPlan fills in the budget and capacity of hosting replicas of v at maxBatch.
func NewVariantPlan(task string, v *pipeline.Variant, replicas, maxBatch int) VariantPlan {
	return VariantPlan{
		Task: task, Variant: v.Name, Replicas: replicas, MaxBatch: maxBatch, Class: wire.ClassOf(v.Name),
		BudgetMs:    v.LatencyFor(maxBatch).P50Ms,
		CapacityQPS: float64(replicas) * v.Throughput(maxBatch),
	}
}

// Static builds the plan of the spec's allocation section. Without one, each task gets one replica of its most
// accurate variant at the largest batch size whose latencies along every chain fit half the SLO (batch 1 if none).
func Static(spec *pipeline.Spec) (*Plan, error) {
	p := &Plan{Pipeline: spec.Name, Mode: ModeStatic}
	if len(spec.Allocation) > 0 {
		for _, a := range spec.Allocation {
			v := spec.Variant(a.Task, a.Variant)
			if v == nil {
				return nil, fmt.Errorf("allocation names %s/%s, which the pipeline does not have", a.Task, a.Variant)
			}
			p.Variants = append(p.Variants, NewVariantPlan(a.Task, v, a.Replicas, a.MaxBatch))
		}
	} else {
		batch := largestBatchWithinHalfSLO(spec)
		for _, t := range spec.Tasks {
			p.Variants = append(p.Variants, NewVariantPlan(t.Name, t.MostAccurate(), 1, batch))
		}
	}
	for _, t := range spec.Tasks {
		if len(p.Hosted(spec, t.Name)) == 0 {
			return nil, fmt.Errorf("allocation hosts no variant of task %s", t.Name)
		}
	}
	p.staticCascades(spec)
	return p, nil
}

// largestBatchWithinHalfSLO is the largest allowed batch size at which every chain of most accurate variants takes
// at most the SLO's processing budget (pipeline.ProcessingBudgetMs: half of it).
func largestBatchWithinHalfSLO(spec *pipeline.Spec) int {
	best := spec.BatchSizes[0]
	for _, b := range spec.BatchSizes {
		fits := true
		for _, chain := range spec.Chains() {
			total := 0.0
			for _, task := range chain {
				total += spec.Task(task).MostAccurate().LatencyFor(b).P50Ms + spec.CommLatencyMs
			}
			if total > pipeline.ProcessingBudgetMs(spec.SLOMs) {
				fits = false
			}
		}
		if fits {
			best = b
		}
	}
	return best
}

// Assignment is the value of wire.AssignKey(worker): the variant a worker runs. A worker with no assignment key, or
// an assignment with an empty Variant, is idle.
type Assignment struct {
	Worker   string  `json:"worker"`
	Pipeline string  `json:"pipeline"`
	Task     string  `json:"task"`
	Variant  string  `json:"variant"`
	MaxBatch int     `json:"max_batch"`
	BudgetMs float64 `json:"budget_ms"`
	Epoch    uint64  `json:"epoch"`
}

// Idle reports whether the assignment leaves the worker without work.
func (a Assignment) Idle() bool { return a.Variant == "" }

// Key is the assignment's variant within its pipeline ("task/variant").
func (a Assignment) Key() wire.VariantKey { return wire.VariantKey{Task: a.Task, Variant: a.Variant} }

// Served is the assignment's variant as heartbeats name it ("pipeline:task/variant").
func (a Assignment) Served() wire.ServedKey { return a.Key().In(a.Pipeline) }

// Assign gives the replicas of the plans to workers, changing as few assignments as possible: a worker keeps its
// variant while its plan still hosts enough replicas of it; the replicas left are filled, in plan order, from idle
// or surplus workers in name order. A replica goes only to a worker of its variant's class (wire.ClassOf): classes
// says each worker's class, a worker it does not name (or nil) being of wire.DefaultClass. It returns the assignment
// of every worker (idle ones included) and how many replicas it could not place for lack of workers of their class.
func Assign(plans []*Plan, workers []string, classes map[string]string, prev map[string]Assignment) (
	next map[string]Assignment, unplaced int) {
	workers = append([]string(nil), workers...)
	sort.Strings(workers)
	classOf := func(w string) string {
		if c := classes[w]; c != "" {
			return c
		}
		return wire.DefaultClass
	}
	want := map[wire.ServedKey]int{} // replicas still to place
	byKey := map[wire.ServedKey]*Plan{}
	for _, p := range plans {
		for _, v := range p.Variants {
			k := wire.VariantKey{Task: v.Task, Variant: v.Variant}.In(p.Pipeline)
			want[k] += v.Replicas
			byKey[k] = p
		}
	}
	next = make(map[string]Assignment, len(workers))
	free := map[string][]string{} // per class, in name order
	for _, w := range workers {
		old, ok := prev[w]
		k := old.Served()
		if ok && !old.Idle() && want[k] > 0 && wire.ClassOf(old.Variant) == classOf(w) {
			want[k]--
			p := byKey[k]
			next[w] = assignmentFor(p, w, p.Find(old.Task, old.Variant))
			continue
		}
		free[classOf(w)] = append(free[classOf(w)], w)
	}
	for _, p := range plans {
		for _, v := range p.Variants {
			k := wire.VariantKey{Task: v.Task, Variant: v.Variant}.In(p.Pipeline)
			class := wire.ClassOf(v.Variant)
			for want[k] > 0 && len(free[class]) > 0 {
				w := free[class][0]
				next[w] = assignmentFor(p, w, p.Find(v.Task, v.Variant))
				free[class] = free[class][1:]
				want[k]--
			}
			unplaced += want[k]
			want[k] = 0
		}
	}
	for _, ws := range free {
		for _, w := range ws {
			next[w] = Assignment{Worker: w}
		}
	}
	return next, unplaced
}

func assignmentFor(p *Plan, worker string, v *VariantPlan) Assignment {
	return Assignment{Worker: worker, Pipeline: p.Pipeline, Task: v.Task, Variant: v.Variant,
		MaxBatch: v.MaxBatch, BudgetMs: v.BudgetMs, Epoch: p.Epoch}
}

// BudgetScale is the factor by which workers stretch the plan's latency budgets into the time an item may spend at a
// task (queueing plus processing). The budgets are execution times, and the plan keeps every chain's execution
// within half the SLO to leave room for queueing; taken literally, any queueing at all would make an item "late".
// Loki divides the SLO into per-task budgets, so the budgets are scaled until the tightest chain (each task at its
// slowest hosted variant, plus the communication latency of its hops) fills the SLO. Never below 1.
func (p *Plan) BudgetScale(spec *pipeline.Spec) float64 {
	scale := 0.0
	for _, chain := range spec.Chains() {
		sum := 0.0
		for _, task := range chain {
			slowest := 0.0
			for _, v := range p.Variants {
				if v.Task == task {
					slowest = max(slowest, v.BudgetMs)
				}
			}
			sum += slowest
		}
		if sum <= 0 {
			continue
		}
		s := (spec.SLOMs - spec.CommLatencyMs*float64(len(chain))) / sum
		if scale == 0 || s < scale {
			scale = s
		}
	}
	return max(scale, 1)
}
