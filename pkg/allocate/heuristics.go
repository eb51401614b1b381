// First points for branch-and-bound: a good incumbent early lets the search prune from its first nodes.

package allocate

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// fixedBatchIncumbent is a first point for steps 2 and 3, found the way an experienced operator would: from the
// solution x of the LP relaxation (the search's root, and nodes 32, 128, 512...), give each variant it uses the batch size where it gives that
// variant the most capacity (or the largest below it at which the paths the LP sends traffic on still fit), and
// every other variant the largest batch size that still fits some path through it; then solve the much smaller
// MILP left (replica counts and flows only) with a node limit, for a point better than the search's incumbent (of
// value best). nil when that restricted problem has no such point within its limit.
func (m *model) fixedBatchIncumbent(x []float64, best float64, opt Options) []float64 {
	fixed := m.fixedBatches(x)
	if !m.tried.first(fixed) {
		return nil // the same restricted problem as at an earlier node: nothing new to find
	}
	sub := *m.prob
	sub.Lower = append([]float64(nil), m.prob.Lower...)
	sub.Upper = append([]float64(nil), m.prob.Upper...)
	m.restrictToBatches(fixed, sub.Lower, sub.Upper)
	return solveRestricted(&sub, best, opt)
}

// fixedBatches is fixedBatchIncumbent's batch index per variant from the LP's x (-1: none fits), its flow
// columns added when the model is priced.
func (m *model) fixedBatches(x []float64) []int {
	fixed := make([]int, len(m.variants)) // batch index per variant, -1 while undecided
	for k := range fixed {
		fixed[k] = -1
	}
	lpUsed := m.fixLPBatches(x, fixed)
	m.fixOtherBatches(fixed, lpUsed)
	if m.priced {
		m.addFixedFlowColumns(fixed)
	}
	return fixed
}

// pathFits says path pa fits its budget with variant k at batch bi, the hops fixed at theirs, the rest at their
// fastest.
func (m *model) pathFits(fixed []int, pa *path, k, bi int) bool {
	lat := 0.0
	for _, h := range pa.hops {
		switch {
		case h == k:
			lat += m.variants[k].latencyMs[bi]
		case fixed[h] >= 0:
			lat += m.variants[h].latencyMs[fixed[h]]
		default:
			lat += slicesMin(m.variants[h].latencyMs)
		}
	}
	return lat <= pa.budgetMs+1e-9
}

// fixLPBatches fixes the batches of the variants the LP's x gives capacity, the most replicas first: the batch of
// their most replicas, or the largest below it at which every path they carry flow on fits. It returns which
// variants those are.
func (m *model) fixLPBatches(x []float64, fixed []int) (lpUsed []bool) {
	flows := m.pathFlows(x)
	pick := make([]int, len(m.variants))
	weight := make([]float64, len(m.variants))
	var order []int
	for k, kv := range m.variants {
		pick[k] = -1
		for bi, col := range kv.replicasCol {
			weight[k] += x[col]
			if x[col] > 1e-9 && (pick[k] < 0 || x[col] > x[kv.replicasCol[pick[k]]]) {
				pick[k] = bi
			}
		}
		if pick[k] >= 0 {
			order = append(order, k)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return weight[order[i]] > weight[order[j]] })
	for _, k := range order {
		for bi := pick[k]; bi >= 0 && fixed[k] < 0; bi-- {
			ok := true
			for _, pa := range m.paths {
				if flows[pa] > 1e-9 && slices.Contains(pa.hops, k) && !m.pathFits(fixed, pa, k, bi) {
					ok = false
					break
				}
			}
			if ok || bi == 0 {
				fixed[k] = bi
			}
		}
	}
	lpUsed = make([]bool, len(m.variants))
	for _, k := range order {
		lpUsed[k] = true
	}
	return lpUsed
}

// fixOtherBatches fixes the batches of the other variants, most accurate first: the largest batch at which some
// path through the variant and variants the LP uses fits (so that the restricted problem can move traffic onto it),
// else some path at all.
func (m *model) fixOtherBatches(fixed []int, lpUsed []bool) {
	var order []int
	for k := range m.variants {
		if fixed[k] < 0 && len(m.variants[k].batchChoiceCol) > 0 {
			order = append(order, k)
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		return m.variants[order[i]].variant.Accuracy > m.variants[order[j]].variant.Accuracy
	})
	withUsed := func(pa *path, k int) bool {
		for _, h := range pa.hops {
			if h != k && !lpUsed[h] {
				return false
			}
		}
		return true
	}
	for _, k := range order {
		for _, strict := range []bool{true, false} {
			for bi := len(m.variants[k].batches) - 1; bi >= 0 && fixed[k] < 0; bi-- {
				for _, pa := range m.paths {
					if slices.Contains(pa.hops, k) && (!strict || withUsed(pa, k)) && m.pathFits(fixed, pa, k, bi) {
						fixed[k] = bi
						break
					}
				}
			}
		}
	}
}

// addFixedFlowColumns adds, per path, the one combination of batch sizes the fixed batches allow, if it fits and is
// not a column yet.
func (m *model) addFixedFlowColumns(fixed []int) {
	for _, pa := range m.paths {
		batches := make([]int, len(pa.hops))
		lat, last := 0.0, len(pa.hops)-1
		for i, h := range pa.hops[:last] {
			if batches[i] = fixed[h]; batches[i] < 0 {
				lat = math.Inf(1)
				break
			}
			lat += m.variants[h].latencyMs[batches[i]]
		}
		batches[last] = m.threshold(pa, lat)
		if fixed[pa.hops[last]] >= 0 && fixed[pa.hops[last]] <= batches[last] {
			if _, ok := m.flowColByKey[flowKey(pa, batches)]; !ok {
				m.addFlowColumn(pa, batches)
			}
		}
	}
}

// restrictToBatches sets the bounds lower and upper of the model's columns to the batch index per variant fixed:
// each variant at its batch size, and only the flow columns those carry.
func (m *model) restrictToBatches(fixed []int, lower, upper []float64) {
	for k, kv := range m.variants {
		for bi := range kv.batchChoiceCol {
			if bi == fixed[k] {
				// Chosen, unless choosing costs something of its own (replicas a burst needs, a headroom): a
				// variant the LP leaves idle may then have to stay out, or the restricted problem has no point.
				if kv.minReplicas[bi] <= 1 && kv.headroom[bi] == 0 {
					lower[kv.batchChoiceCol[bi]] = 1
				}
				continue
			}
			upper[kv.batchChoiceCol[bi]], upper[kv.replicasCol[bi]] = 0, 0
		}
	}
	for _, c := range m.flows {
		if !m.carries(c, func(h int) int { return fixed[h] }) {
			upper[c.col] = 0
		}
	}
	for _, u := range m.unservedCols {
		upper[u] = 0
	}
}

// solveRestricted solves fixedBatchIncumbent's restricted problem sub with a node limit: its point, or nil. Only a
// point better than best (the search's incumbent's value) is of use, so best cuts the restricted search off: it
// prunes what cannot beat it instead of finding and proving the worse points on its way (BenchmarkClassesSweep's
// demands of 1000-1500 and 150-200 QPS, one worker: 5,892 nodes in all, the restricted searches' and the main
// ones', where they took 7,719 without it).
func solveRestricted(sub *milp.Problem, best float64, opt Options) []float64 {
	// Pseudo-costs alone choose its branchings: with strong branching, most of its LPs, whole solves took 1.1-1.3x
	// as long (384 accuracy-scaling solves of the examples).
	o := milp.Options{MaxNodes: 2000, NoStrongBranching: true}
	if !math.IsInf(best, 0) {
		o.Cutoff, o.UseCutoff = best, true
	}
	if opt.TimeLimit > 0 {
		o.TimeLimit = opt.TimeLimit / 4
		if !o.UseCutoff {
			// With no point yet, the search's grace is for this one's first (firstPointGrace); with one, this
			// search only improves on it, and stops at its limit.
			o.FirstPointGrace = firstPointGrace * opt.TimeLimit
		}
	}
	// Most columns are now fixed at zero: solved without them, the restricted problem is a fraction of the size.
	small, expand := sub.WithoutZeroColumns()
	res, err := milp.Solve(small, o)
	if err != nil {
		return nil
	}
	return expand(res.X)
}

// hardwareIncumbent is a first feasible point of step 1: every most accurate variant at the largest batch size
// (one for all) at which every chain fits, with just enough replicas. nil when it does not fit the cluster.
func (m *model) hardwareIncumbent() []float64 {
	if x := m.oneVariantPerTask(); x != nil && m.prob.Violation(x) <= 1e-6 {
		return x
	}
	// One variant per task (the first kept), all paths through them.
	pick := map[string]int{}
	for k, kv := range m.variants {
		if _, ok := pick[kv.task]; !ok && len(kv.batchChoiceCol) > 0 {
			pick[kv.task] = k
		}
	}
	return m.uniformPoint(pick)
}

// fallback is what a search of the accuracy step that stopped at its limit before it found a point (sol) still
// offers: the fastest variant of each task (the most items a second per replica) as hardwareIncumbent places
// them, with its gap to the search's bound; sol itself when that does not fit.
func (m *model) fallback(sol milp.Result) milp.Result {
	pick := map[string]int{}
	best := map[string]float64{}
	for k, kv := range m.variants {
		if t := slicesMax(kv.throughput); len(kv.batchChoiceCol) > 0 && t > best[kv.task] {
			pick[kv.task], best[kv.task] = k, t
		}
	}
	x := m.uniformPoint(pick)
	if x == nil {
		return sol
	}
	v := m.prob.Value(x)
	return milp.Result{Status: milp.Limit, X: x, Objective: v, Bound: sol.Bound, Gap: accuracyGap(sol.Bound, v)}
}

// accuracyGap is the relative gap of a plan of system accuracy v to bound, a bound on the optimum (infinite when
// the search stopped before its root: a system accuracy is at most 1).
func accuracyGap(bound, v float64) float64 {
	return max(0, (min(bound, 1)-v)/max(v, 1e-9))
}

// uniformPoint is a feasible point of the model hosting the variant pick[t] of each task t, all at the largest
// batch size (one for all) at which every chain fits, with just enough replicas; nil when none fits the cluster.
func (m *model) uniformPoint(pick map[string]int) []float64 {
	p := m.prob
	var batches []int
	seen := map[int]bool{}
	for _, kv := range m.variants {
		for _, b := range kv.batches {
			if !seen[b] {
				seen[b] = true
				batches = append(batches, b)
			}
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(batches)))
	for _, b := range batches {
		x := make([]float64, p.NumCols())
		copy(x, p.Lower)
		choice := map[int]int{}
		okAll := true
		for _, k := range pick {
			kv := m.variants[k]
			bi := -1
			for i, kb := range kv.batches {
				if kb <= b {
					bi = i // the largest allowed batch not above b
				}
			}
			if bi < 0 {
				okAll = false
				break
			}
			choice[k] = bi
		}
		if !okAll {
			continue
		}
		for ci := range m.chains {
			var found *flowColumn
			for _, c := range m.flows {
				if c.path.chain == ci && m.carries(c, func(h int) int {
					if bi, ok := choice[h]; ok {
						return bi
					}
					return -1
				}) {
					found = c
					break
				}
			}
			if found == nil {
				okAll = false
				break
			}
			x[found.col] = m.in.Demand
		}
		if !okAll {
			continue
		}
		loads := m.loads(x)
		for k, bi := range choice {
			kv := m.variants[k]
			if n := kv.replicasFor(bi, loads[k]); n > 0 {
				x[kv.batchChoiceCol[bi]], x[kv.replicasCol[bi]] = 1, float64(n)
			}
		}
		m.setSpillColumns(x)
		m.setAggregateColumns(x)
		if p.Violation(x) <= 1e-6 {
			return x
		}
	}
	return nil
}

// setSpillColumns sets the spill columns of x to carry the load of its flow columns to its replicas: the load
// arriving at each batch index, from the slowest down, runs there as far as the replicas there allow, and the rest
// moves on to the next faster batch size (the best order: load that may use a batch size may use every faster one
// too).
func (m *model) setSpillColumns(x []float64) {
	arriving := map[int]float64{} // capacity row -> load
	for _, c := range m.flows {
		last := len(c.batches) - 1
		if row, ok := m.capacityRowOf(c.path, last, c.batches[last]); ok {
			arriving[row] += c.path.itemsPerRequest[last] * x[c.col]
		}
	}
	spill := func(kv *keptVariant, rows, cols []int) {
		carry := 0.0
		for bi := len(kv.batches) - 1; bi >= 1; bi-- {
			absorbed := kv.absorbs(bi, x[kv.replicasCol[bi]], x[kv.batchChoiceCol[bi]])
			carry = max(0, carry+arriving[rows[bi]]-absorbed)
			x[cols[bi]] = carry
		}
	}
	for _, kv := range m.variants {
		if kv.spillDownCol == nil {
			continue
		}
		spill(kv, kv.capacityRow, kv.spillDownCol)
		for _, jc := range kv.joinCapacity {
			spill(kv, jc.row, jc.spillDownCol)
		}
	}
}

// setAggregateColumns sets the aggregate columns of x from its replica columns.
func (m *model) setAggregateColumns(x []float64) {
	for _, c := range m.taskServersCol {
		x[c] = 0
	}
	for _, kv := range m.variants {
		if kv.replicasTotalCol < 0 {
			continue
		}
		x[kv.replicasTotalCol] = 0
		for _, col := range kv.replicasCol {
			x[kv.replicasTotalCol] += x[col]
		}
		x[m.taskServersCol[kv.task]] += x[kv.replicasTotalCol]
	}
}

// triedBatches remembers the batch sizes fixedBatchIncumbent has fixed in a solve: the LPs of nodes deep in the
// search often lead to the same ones, whose restricted problem it would solve again for the same point (on the
// traffic example, that cost more than the nodes it saved). Safe for the concurrent calls of several workers.
type triedBatches struct {
	mu   sync.Mutex
	seen map[string]bool
}

// first says fixed is new, and remembers it (always new without a memory).
func (t *triedBatches) first(fixed []int) bool {
	if t == nil {
		return true
	}
	key := fmt.Sprint(fixed)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[key] {
		return false
	}
	if t.seen == nil {
		t.seen = map[string]bool{}
	}
	t.seen[key] = true
	return true
}
