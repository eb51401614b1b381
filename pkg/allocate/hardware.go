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
	d := m.in.Demand
	// One path per chain, which carries the whole demand.
	loads := make([]float64, len(m.variants))
	for _, pa := range m.paths {
		for i, h := range pa.hops {
			if pa.chain == m.refChain[m.variants[h].task] {
				loads[h] += pa.itemsPerRequest[i] * d
			}
		}
	}
	// A positive demand needs a replica of every task it reaches (the model's "a replica of" rows).
	minReplicas := func(k int) int {
		if d > 0 && loads[k] > 0 {
			return 1
		}
		return 0
	}

	choice := make([]int, len(vars)) // batch index per entry of vars
	best := make([]int, len(vars))
	bestServers, bestHeadroom := math.MaxInt, 0.0
	replicas := func(k, bi int) int {
		kv := m.variants[k]
		return max(minReplicas(k), kv.replicasFor(bi, loads[k]))
	}
	pos := map[int]int{} // variant -> index into vars
	for i, k := range vars {
		pos[k] = i
	}
	var rec func(i, servers int)
	rec = func(i, servers int) {
		if servers > m.in.Servers || servers > bestServers {
			return
		}
		if i == len(vars) {
			for _, pa := range m.paths {
				lat := 0.0
				for _, h := range pa.hops {
					lat += m.variants[h].latencyMs[choice[pos[h]]]
				}
				if lat > pa.budgetMs+1e-9 {
					return
				}
			}
			headroom := math.Inf(1)
			for j, k := range vars {
				if loads[k] > 0 {
					kv := m.variants[k]
					headroom = min(headroom, float64(replicas(k, choice[j]))*kv.throughput[choice[j]]/loads[k])
				}
			}
			if servers < bestServers || headroom > bestHeadroom {
				bestServers, bestHeadroom = servers, headroom
				copy(best, choice)
			}
			return
		}
		k := vars[i]
		for bi := range m.variants[k].batches {
			choice[i] = bi
			rec(i+1, servers+replicas(k, bi))
		}
	}
	rec(0, 0)
	if bestServers == math.MaxInt {
		return milp.Result{Status: milp.Infeasible}, true
	}
	x := make([]float64, m.prob.NumCols())
	x[m.demandCol] = d
	for i, k := range vars {
		kv := m.variants[k]
		if n := replicas(k, best[i]); n > 0 {
			x[kv.batchChoiceCol[best[i]]], x[kv.replicasCol[best[i]]] = 1, float64(n)
		}
	}
	for _, c := range m.flows {
		if m.carries(c, func(h int) int { return best[pos[h]] }) {
			x[c.col] = d
		}
	}
	m.setSpillColumns(x)
	m.setAggregateColumns(x)
	v := float64(bestServers)
	return milp.Result{Status: milp.Optimal, X: x, Objective: v, Bound: v}, true
}
