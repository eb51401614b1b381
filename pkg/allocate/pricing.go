// Branch-and-price: for a model past MaxFlowColumns, flow columns are generated as the LPs need them.

package allocate

import (
	"math"
	"slices"
	"sort"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// unservedCost is the objective cost of one request per second of unserved demand in a priced accuracy step: far
// above what serving it could be worth (the system accuracy is at most 1), so the LP uses it only when it must.
const unservedCost = 1e4

// pricer is the column generator of a priced model (nil otherwise): per path, the combination of batch sizes whose
// flow column has the most negative reduced cost under the LP's duals, when it is negative. When none is and the LP
// still leaves demand unserved, the node has no point.
func (m *model) pricer() func(duals, x []float64) (int, bool) {
	if !m.priced {
		return nil
	}
	sign := 1.0 // minimisation form of the objective
	if m.prob.Sense == milp.Maximize {
		sign = -1
	}
	type candidate struct {
		c  *flowColumn
		rc float64
	}
	return func(duals, x []float64) (int, bool) {
		var found []candidate
		for _, pa := range m.paths {
			if c, rc := m.cheapestFlowColumn(pa, duals, sign); c != nil {
				if _, ok := m.flowColByKey[flowKey(pa, c.batches)]; !ok {
					found = append(found, candidate{c, rc})
				}
			}
		}
		// The most negative first, a few per round: adding every path's best at once grows the LP by thousands
		// of columns per node on a 4-task chain, most of them never used.
		sort.Slice(found, func(i, j int) bool { return found[i].rc < found[j].rc })
		added := 0
		for _, f := range found[:min(len(found), columnsPerRound)] {
			m.addFlowColumn(f.c.path, f.c.batches)
			added++
		}
		if added > 0 {
			return added, false
		}
		for _, u := range m.unservedCols {
			if x[u] > 1e-9 {
				return 0, true
			}
		}
		return 0, false
	}
}

// columnsPerRound is how many columns a round of pricing adds at most.
const columnsPerRound = 50

// cheapestFlowColumn is the flow column (not yet added) of path pa with the most negative reduced cost under duals
// (below -1e-9) and that cost, or nil: a depth-first search over the hops' batch sizes that fit the budget, pruned
// by the least each remaining hop (and prefix agreement) can still subtract.
func (m *model) cheapestFlowColumn(pa *path, duals []float64, sign float64) (*flowColumn, float64) {
	n := len(pa.hops)
	fixedPart := sign*m.flowObjective(pa) - duals[m.chainDemandRow[pa.chain]]
	if m.minAccuracyRow >= 0 {
		fixedPart -= duals[m.minAccuracyRow] * m.chainShare[pa.chain] * pa.accuracy
	}
	// hopCost[i][bi]: the capacity term of hop i at batch bi.
	hopCost := make([][]float64, n)
	least := make([]float64, n+1) // least[i]: the least the hops from i on can add
	for i := n - 1; i >= 0; i-- {
		kv := m.variants[pa.hops[i]]
		hopCost[i] = make([]float64, len(kv.batches))
		lo := math.Inf(1)
		for bi := range kv.batches {
			if pa.chain == m.refChain[kv.task] {
				hopCost[i][bi] = -duals[kv.capacityRow[bi]] * pa.itemsPerRequest[i]
			}
			lo = min(lo, hopCost[i][bi])
		}
		least[i] = least[i+1] + lo
	}
	// Prefix agreement terms, known once the prefix's batches are; until then bounded by their least.
	type prefixTerm struct {
		pr    *prefixRows
		least float64
	}
	var prefixes []prefixTerm
	prefixCost := func(pr *prefixRows, rows []int) float64 {
		if pa.chain == pr.ref {
			c := 0.0
			for _, r := range rows {
				c -= duals[r]
			}
			return c
		}
		return duals[rows[slices.Index(pr.others, pa.chain)]]
	}
	for k := range m.prefixes {
		pr := &m.prefixes[k]
		if pa.chain != pr.ref && !slices.Contains(pr.others, pa.chain) {
			continue
		}
		lo := 0.0
		for _, rows := range pr.rows {
			lo = min(lo, prefixCost(pr, rows))
		}
		prefixes = append(prefixes, prefixTerm{pr, lo})
	}
	pending := func(i int) float64 { // the least the prefixes not yet complete at hop i can add
		s := 0.0
		for _, pt := range prefixes {
			if pt.pr.depth > i {
				s += pt.least
			}
		}
		return s
	}
	best, bestRC := []int(nil), -1e-9
	batches := make([]int, n)
	var rec func(i int, lat, rc float64)
	rec = func(i int, lat, rc float64) {
		if rc+least[i]+pending(i) >= bestRC {
			return
		}
		if i == n {
			best, bestRC = append(best[:0], batches...), rc
			return
		}
		if i == n-1 { // the last hop: its threshold
			if bi := m.threshold(pa, lat); bi >= 0 {
				batches[i] = bi
				rec(n, 0, rc+hopCost[i][bi])
			}
			return
		}
		for bi, l := range m.variants[pa.hops[i]].latencyMs {
			if lat+l+pa.fastestAfterMs[i] > pa.budgetMs+1e-9 {
				continue
			}
			batches[i] = bi
			next := rc + hopCost[i][bi]
			for _, pt := range prefixes {
				if pt.pr.depth == i+1 {
					next += prefixCost(pt.pr, pt.pr.rows[prefixKey(pa.hops[:i+1], batches[:i+1])])
				}
			}
			rec(i+1, lat+l, next)
		}
	}
	rec(0, 0, fixedPart)
	if best == nil {
		return nil, 0
	}
	return &flowColumn{path: pa, batches: best}, bestRC
}
