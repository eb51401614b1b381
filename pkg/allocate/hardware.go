package allocate

import (
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// enumerateHardware solves step 1 exactly without branch-and-bound when every task keeps a single variant (its most
// accurate one, the usual case): then each chain has one path, the traffic reaching every variant is fixed by the
// demand, and a batch size per variant decides everything else. The fewest replicas that carry a variant's load at
// batch b are ceil(load/throughput(b)), so the optimum is the batch vector whose paths fit their latency budgets
// with the fewest servers (the least cost on a priced cluster): at most |B|^tasks vectors (7^4 = 2401 for a 4-task
// chain with 7 batch sizes), each checked in microseconds. Ties go to the vector with the most headroom (the largest
// least ratio of a variant's capacity to its load): workers batch dynamically, so a larger maximum batch costs no
// latency at low load and absorbs bursts. ok is false when the model is not of that shape (several variants of a
// task tie for the top accuracy: the model's deployments on several server classes) and the MILP must be solved
// instead; hardwareIncumbent then searches the plans that host each task on one of them.
func (m *model) enumerateHardware() (res milp.Result, ok bool) {
	seen := map[string]bool{}
	var vars []int // indexes into m.variants of the variants on some path
	for k, kv := range m.variants {
		if len(kv.batchChoiceCol) == 0 {
			continue
		}
		if seen[kv.task] {
			return milp.Result{}, false
		}
		seen[kv.task] = true
		vars = append(vars, k)
	}
	e := newBatchSearch(m, [][]int{vars})
	e.visit(0, 0)
	if e.best == nil || m.overCap(e.bestCost) {
		return milp.Result{Status: milp.Infeasible}, true
	}
	v := e.bestCost
	return milp.Result{Status: milp.Optimal, X: e.point(), Objective: v, Bound: v}, true
}

// oneVariantPerTask is hardwareIncumbent's first point on a model whose tasks keep several variants (deployments of
// their most accurate model on several server classes): the best plan that hosts each task on one of them, found
// by the enumeration over every choice of variants (at most classes^tasks), each task's whole load on it. nil when
// none fits the cluster.
func (m *model) oneVariantPerTask() []float64 {
	byTask := map[string][]int{}
	var tasks []string
	for k, kv := range m.variants {
		if len(kv.batchChoiceCol) == 0 {
			continue
		}
		if _, ok := byTask[kv.task]; !ok {
			tasks = append(tasks, kv.task)
		}
		byTask[kv.task] = append(byTask[kv.task], k)
	}
	var choices [][]int
	var rec func(i int, vars []int)
	rec = func(i int, vars []int) {
		if i == len(tasks) {
			choices = append(choices, append([]int(nil), vars...))
			return
		}
		for _, k := range byTask[tasks[i]] {
			rec(i+1, append(vars, k))
		}
	}
	rec(0, nil)
	e := newBatchSearch(m, choices)
	for c := range choices {
		e.use(c)
		e.visit(0, 0)
	}
	if e.best == nil {
		return nil
	}
	best := e.best
	e.use(e.bestChoice)
	e.best = best
	return e.point()
}

// batchSearch is enumerateHardware's search over the batch vectors of vars, depth-first, cut where a vector takes
// more servers of a class than the cluster has, or costs more than the best one found.
type batchSearch struct {
	m       *model
	d       float64     // the demand
	choices [][]int     // the sets of variants searched, one variant per task each
	current int         // the index in choices of the variants searched
	vars    []int       // the variants on some path, one per task: choices[current]
	pos     map[int]int // variant -> index into vars
	loads   []float64   // per variant, the items per second the demand brings it
	used    map[string]int

	choice       []int // batch index per entry of vars, as visited
	best         []int
	bestChoice   int
	bestCost     float64
	bestHeadroom float64
}

func newBatchSearch(m *model, choices [][]int) *batchSearch {
	e := &batchSearch{m: m, d: m.in.Demand, choices: choices, used: map[string]int{}, bestCost: math.Inf(1)}
	e.use(0)
	return e
}

// use makes choices[c] the variants searched: each carries its task's whole load, as the one path per chain through
// them does.
func (e *batchSearch) use(c int) {
	m := e.m
	e.current, e.vars, e.pos, e.loads = c, e.choices[c], map[int]int{}, make([]float64, len(m.variants))
	e.choice = make([]int, len(e.vars))
	for i, k := range e.vars {
		e.pos[k] = i
	}
	for _, pa := range m.paths {
		if !e.onPath(pa) {
			continue
		}
		for i, h := range pa.hops {
			if pa.chain == m.refChain[m.variants[h].task] {
				e.loads[h] += pa.itemsPerRequest[i] * e.d
			}
		}
	}
}

// onPath says path pa runs through the variants searched only.
func (e *batchSearch) onPath(pa *path) bool {
	for _, h := range pa.hops {
		if _, ok := e.pos[h]; !ok {
			return false
		}
	}
	return true
}

// replicas are the fewest replicas of variant k at batch index bi that carry its load. A positive demand needs a
// replica of every task it reaches (the model's "a replica of" rows).
func (e *batchSearch) replicas(k, bi int) int {
	minReplicas := 0
	if e.d > 0 && e.loads[k] > 0 {
		minReplicas = 1
	}
	return max(minReplicas, e.m.variants[k].replicasFor(bi, e.loads[k]))
}

// visit chooses the batches of vars[i:], the earlier ones costing cost.
func (e *batchSearch) visit(i int, cost float64) {
	m := e.m
	if cost > e.bestCost+1e-9 {
		return
	}
	if i == len(e.vars) {
		e.leaf(cost)
		return
	}
	k := e.vars[i]
	kv := m.variants[k]
	class := kv.variant.Class()
	for bi := range kv.batches {
		n := e.replicas(k, bi)
		if e.used[class]+n > m.in.classServers(kv.variant.Name) {
			continue
		}
		e.choice[i] = bi
		e.used[class] += n
		e.visit(i+1, cost+float64(n)*m.serverWeight(kv))
		e.used[class] -= n
	}
}

// leaf keeps the batch vector chosen, at cost, if its paths fit their budgets and it is the best yet.
func (e *batchSearch) leaf(cost float64) {
	m := e.m
	for _, pa := range m.paths {
		if !e.onPath(pa) {
			continue
		}
		lat := 0.0
		for _, h := range pa.hops {
			lat += m.variants[h].latencyMs[e.choice[e.pos[h]]]
		}
		if lat > pa.budgetMs+1e-9 {
			return
		}
	}
	headroom := math.Inf(1)
	for j, k := range e.vars {
		if e.loads[k] > 0 {
			kv := m.variants[k]
			headroom = min(headroom, float64(e.replicas(k, e.choice[j]))*kv.throughput[e.choice[j]]/e.loads[k])
		}
	}
	if e.best == nil || cost < e.bestCost-1e-9 || headroom > e.bestHeadroom {
		e.bestCost, e.bestHeadroom = cost, headroom
		e.best = append(e.best[:0], e.choice...)
		e.bestChoice = e.current
	}
}

// point is the model's point of the best batch vector.
func (e *batchSearch) point() []float64 {
	m := e.m
	x := make([]float64, m.prob.NumCols())
	x[m.demandCol] = e.d
	for i, k := range e.vars {
		kv := m.variants[k]
		if n := e.replicas(k, e.best[i]); n > 0 {
			x[kv.batchChoiceCol[e.best[i]]], x[kv.replicasCol[e.best[i]]] = 1, float64(n)
		}
	}
	for _, c := range m.flows {
		if m.carries(c, func(h int) int {
			if i, ok := e.pos[h]; ok {
				return e.best[i]
			}
			return -1
		}) {
			x[c.col] = e.d
		}
	}
	m.setSpillColumns(x)
	m.setAggregateColumns(x)
	return x
}
