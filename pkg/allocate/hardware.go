package allocate

import (
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// enumerateHardware solves step 1 exactly without branch-and-bound when every task keeps a single variant (its most
// accurate one, the usual case): then each chain has one path, the traffic reaching every variant is fixed by the
// demand, and a batch size per variant decides everything else. The fewest replicas that carry a variant's load at
// batch b are ceil(load/throughput(b)), so the optimum is the batch vector whose paths fit their latency budgets
// with the fewest servers: at most |B|^tasks vectors (7^4 = 2401 for a 4-task chain with 7 batch sizes), each
// checked in microseconds. Ties go to the vector with the most headroom (the largest least ratio of a variant's
// capacity to its load): workers batch dynamically, so a larger maximum batch costs no latency at low load and
// absorbs bursts. ok is false when the model is not of that shape (several variants of a task tie for the top
// accuracy) and the MILP must be solved instead.
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
	e := newBatchSearch(m, vars)
	e.visit(0, 0)
	if e.bestServers == math.MaxInt {
		return milp.Result{Status: milp.Infeasible}, true
	}
	v := float64(e.bestServers)
	return milp.Result{Status: milp.Optimal, X: e.point(), Objective: v, Bound: v}, true
}

// batchSearch is enumerateHardware's search over the batch vectors of vars, depth-first, cut where a vector takes
// more servers than the cluster has or the best one found.
type batchSearch struct {
	m     *model
	d     float64     // the demand
	vars  []int       // the variants on some path, one per task
	pos   map[int]int // variant -> index into vars
	loads []float64   // per variant, the items per second the demand brings it

	choice       []int // batch index per entry of vars, as visited
	best         []int
	bestServers  int
	bestHeadroom float64
}

func newBatchSearch(m *model, vars []int) *batchSearch {
	e := &batchSearch{m: m, d: m.in.Demand, vars: vars, pos: map[int]int{}, loads: make([]float64, len(m.variants)),
		choice: make([]int, len(vars)), best: make([]int, len(vars)), bestServers: math.MaxInt}
	// One path per chain, which carries the whole demand.
	for _, pa := range m.paths {
		for i, h := range pa.hops {
			if pa.chain == m.refChain[m.variants[h].task] {
				e.loads[h] += pa.itemsPerRequest[i] * e.d
			}
		}
	}
	for i, k := range vars {
		e.pos[k] = i
	}
	return e
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

// visit chooses the batches of vars[i:], the earlier ones taking servers.
func (e *batchSearch) visit(i, servers int) {
	m := e.m
	if servers > m.in.Servers || servers > e.bestServers {
		return
	}
	if i == len(e.vars) {
		e.leaf(servers)
		return
	}
	k := e.vars[i]
	for bi := range m.variants[k].batches {
		e.choice[i] = bi
		e.visit(i+1, servers+e.replicas(k, bi))
	}
}

// leaf keeps the batch vector chosen, on servers, if its paths fit their budgets and it is the best yet.
func (e *batchSearch) leaf(servers int) {
	m := e.m
	for _, pa := range m.paths {
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
	if servers < e.bestServers || headroom > e.bestHeadroom {
		e.bestServers, e.bestHeadroom = servers, headroom
		copy(e.best, e.choice)
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
		if m.carries(c, func(h int) int { return e.best[e.pos[h]] }) {
			x[c.col] = e.d
		}
	}
	m.setSpillColumns(x)
	m.setAggregateColumns(x)
	return x
}
