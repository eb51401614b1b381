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
// by the least each remaining hop (and agreement) can still subtract.
func (m *model) cheapestFlowColumn(pa *path, duals []float64, sign float64) (*flowColumn, float64) {
	fixedPart := sign*m.flowObjective(pa) - duals[m.chainDemandRow[pa.chain]]
	if m.minAccuracyRow >= 0 {
		fixedPart -= duals[m.minAccuracyRow] * m.chainShare[pa.chain] * pa.accuracy
	}
	c := newColumnSearch(m, pa, duals)
	c.visit(0, 0, fixedPart)
	if c.best == nil {
		return nil, 0
	}
	return &flowColumn{path: pa, batches: c.best}, c.bestRC
}

// columnSearch is cheapestFlowColumn's depth-first search over the batch sizes of path pa's hops.
type columnSearch struct {
	m       *model
	pa      *path
	duals   []float64
	hopCost [][]float64 // hopCost[i][bi]: the capacity term of hop i at batch bi
	least   []float64   // least[i]: the least the hops from i on can add
	// agreements are the agreement terms of pa, known once the batches of the shared tasks are; until then
	// bounded by their least.
	agreements []agreementTerm
	batches    []int // per hop, as visited
	best       []int
	bestRC     float64
}

type agreementTerm struct {
	pr    *agreementRows
	least float64
}

func newColumnSearch(m *model, pa *path, duals []float64) *columnSearch {
	n := len(pa.hops)
	c := &columnSearch{m: m, pa: pa, duals: duals, hopCost: make([][]float64, n), least: make([]float64, n+1),
		batches: make([]int, n), bestRC: -1e-9}
	for i := n - 1; i >= 0; i-- {
		kv := m.variants[pa.hops[i]]
		c.hopCost[i] = make([]float64, len(kv.batches))
		lo := math.Inf(1)
		for bi := range kv.batches {
			if row, ok := m.capacityRowOf(pa, i, bi); ok {
				c.hopCost[i][bi] = -duals[row] * pa.itemsPerRequest[i]
			}
			lo = min(lo, c.hopCost[i][bi])
		}
		c.least[i] = c.least[i+1] + lo
	}
	for k := range m.agreements {
		pr := &m.agreements[k]
		if pa.chain != pr.ref && !slices.Contains(pr.others, pa.chain) {
			continue
		}
		lo := 0.0
		for _, rows := range pr.rows {
			lo = min(lo, c.agreementCost(pr, rows))
		}
		c.agreements = append(c.agreements, agreementTerm{pr, lo})
	}
	return c
}

// agreementCost is the reduced cost an agreement's rows add to the path's column.
func (c *columnSearch) agreementCost(pr *agreementRows, rows []int) float64 {
	if c.pa.chain == pr.ref {
		cost := 0.0
		for _, r := range rows {
			cost -= c.duals[r]
		}
		return cost
	}
	return c.duals[rows[slices.Index(pr.others, c.pa.chain)]]
}

// pending is the least the agreements not yet complete at hop i can add.
func (c *columnSearch) pending(i int) float64 {
	s := 0.0
	for _, pt := range c.agreements {
		if pt.pr.depth > i {
			s += pt.least
		}
	}
	return s
}

// visit chooses the batches of hops i on, the earlier ones taking lat of the budget and adding rc.
func (c *columnSearch) visit(i int, lat, rc float64) {
	m, pa, n := c.m, c.pa, len(c.pa.hops)
	if rc+c.least[i]+c.pending(i) >= c.bestRC {
		return
	}
	if i == n {
		c.best, c.bestRC = append(c.best[:0], c.batches...), rc
		return
	}
	if i == n-1 { // the last hop: its threshold
		if bi := m.threshold(pa, lat); bi >= 0 {
			c.batches[i] = bi
			c.visit(n, 0, c.completed(i, rc+c.hopCost[i][bi]))
		}
		return
	}
	for bi, l := range m.variants[pa.hops[i]].latencyMs {
		if lat+l+pa.fastestAfterMs[i] > pa.budgetMs+1e-9 {
			continue
		}
		c.batches[i] = bi
		c.visit(i+1, lat+l, c.completed(i, rc+c.hopCost[i][bi]))
	}
}

// completed is rc plus the costs of the agreements whose shared tasks end at hop i, now that their batches are
// known.
func (c *columnSearch) completed(i int, rc float64) float64 {
	for _, pt := range c.agreements {
		if pt.pr.depth == i+1 {
			rc += c.agreementCost(pt.pr, pt.pr.rows[pt.pr.key(c.pa.hops, c.batches)])
		}
	}
	return rc
}
