// Chains and paths of variants, and the flow columns that carry a path's traffic at batch sizes that fit its
// latency budget: the paper's constraint 7, exactly, with no latency rows.

package allocate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// A chain is the tasks from the root to one leaf (pipeline.Spec.Chains); a tree of tasks has one per leaf, and a
// request's traffic goes down each. A path picks one kept variant per task of a chain; a flow column picks, on top,
// an allowed batch per hop.

// path is a root-to-leaf path of variants through one chain.
type path struct {
	id    int // index in model.paths
	chain int
	hops  []int // indexes into model.variants, one per task of the chain
	// itemsPerRequest[i] is the items reaching hop i per request entering the path (the product of the
	// multiplicative factors above it).
	itemsPerRequest []float64
	accuracy        float64
	budgetMs        float64 // the chain's latency budget
	// fastestAfterMs[i] is the least latency of the hops after hop i.
	fastestAfterMs []float64
}

// flowColumn is a path with a batch size per hop whose latencies fit the path's budget together, and the column of
// the traffic it carries. The last hop's entry is the largest batch index the others leave room for; its traffic
// may run at any batch index up to it (see threshold).
type flowColumn struct {
	path    *path
	batches []int // batch index (into the hop variant's batches) per hop
	col     int
}

// fanout is the multiplicative factor from a variant of task to one child task.
func (in Input) fanout(task string, v *pipeline.Variant, child string) float64 {
	return in.Spec.Task(task).FanoutTo(v, child, in.Fanout)
}

// chainBudget is the execution time a chain's variants may take: the SLO's processing budget (half of it, the other
// half is left for queueing, as Loki does) minus the communication latency of its hops.
func (in Input) chainBudget(chain []string) float64 {
	slo := in.Spec.SLOMs
	if in.SLOMs > 0 {
		slo = in.SLOMs
	}
	return pipeline.ProcessingBudgetMs(slo) - in.Spec.CommLatencyMs*float64(len(chain))
}

// chainWeights is each chain's share of the leaf traffic, from the multiplicative factors of the most accurate
// variants (the traffic a request sends down each chain at full accuracy), times its branches' weights over their
// even shares (pipeline.Task.BranchScale), as the frontend weighs a request's leaves (pipeline.Spec.LeafWeight).
func chainWeights(in Input, chains [][]string) []float64 {
	w := make([]float64, len(chains))
	total := 0.0
	for ci, chain := range chains {
		f := 1.0
		for i := 0; i+1 < len(chain); i++ {
			if in.cascadeNext[chain[i+1]] {
				continue
			}
			t := in.Spec.Task(chain[i])
			f *= in.fanout(t.Name, t.MostAccurate(), chain[i+1]) * t.BranchScale(chain[i+1])
		}
		w[ci] = f
		total += f
	}
	for ci := range w {
		if total > 0 {
			w[ci] /= total
		} else {
			w[ci] = 1 / float64(len(w))
		}
	}
	return w
}

// enumeratePaths adds the paths: every combination of kept variants along each chain whose fastest latency fits
// the chain's budget. A chain with none makes the step infeasible for any demand: an error that says why.
func (m *model) enumeratePaths() error {
	for ci, chain := range m.chains {
		var rec func(i int, hops []int)
		rec = func(i int, hops []int) {
			if i == len(chain) {
				m.addPath(ci, append([]int(nil), hops...))
				return
			}
			for k, kv := range m.variants {
				if kv.task == chain[i] {
					rec(i+1, append(hops, k))
				}
			}
		}
		rec(0, nil)
	}
	for ci := range m.chains {
		has := false
		for _, pa := range m.paths {
			has = has || pa.chain == ci
		}
		if !has {
			return fmt.Errorf("no path of variants of chain %s fits its latency budget of %.1f ms (half the SLO, "+
				"less %.1f ms per hop)", strings.Join(m.chains[ci], "->"), m.chainBudgetMs[ci], m.in.Spec.CommLatencyMs)
		}
	}
	return nil
}

// addPath adds the path of variants hops along chain ci if its fastest latency fits the chain's budget.
func (m *model) addPath(ci int, hops []int) {
	chain := m.chains[ci]
	pa := &path{id: len(m.paths), chain: ci, hops: hops, budgetMs: m.chainBudgetMs[ci],
		fastestAfterMs: make([]float64, len(hops))}
	for i := len(hops) - 2; i >= 0; i-- {
		pa.fastestAfterMs[i] = pa.fastestAfterMs[i+1] + slicesMin(m.variants[hops[i+1]].latencyMs)
	}
	if slicesMin(m.variants[hops[0]].latencyMs)+pa.fastestAfterMs[0] > pa.budgetMs+1e-9 {
		return
	}
	items := 1.0
	names := make([]string, len(hops))
	for i, h := range hops {
		pa.itemsPerRequest = append(pa.itemsPerRequest, items)
		kv := m.variants[h]
		names[i] = wire.VariantKey{Task: kv.task, Variant: kv.variant.Name}.String()
		if i+1 < len(hops) {
			items *= m.in.fanout(kv.task, kv.variant, chain[i+1])
		}
	}
	pa.accuracy = m.in.Spec.PathAccuracyOf(names)
	m.paths = append(m.paths, pa)
}

// MaxFlowColumns is how many flow columns (one per path of variants and combination of batch sizes that fits the
// path's latency budget, the last hop's left open: see threshold) a model lists up front. They grow as
// variants^tasks * batches^(tasks-1): the 3-task traffic example has 312; a 4-task chain with 6 variants and 7 batch
// sizes per task would have about 280,000 (gigabytes to build). The accuracy and max-demand steps generate them as
// the LPs need them (branch-and-price) well before (priceFlowColumns); past it the hardware step, one path per chain,
// fails with ErrModelTooLarge, and WriteLP too.
const MaxFlowColumns = 20000

// flowColumnLimit is MaxFlowColumns, lowered by tests to make small models priced.
var flowColumnLimit = MaxFlowColumns

// priceFlowColumns is how many flow columns the accuracy and max-demand steps list up front (WriteLP's model lists up
// to MaxFlowColumns): past it their LPs are large, most columns never leave zero, and generating them is faster.
// On the three-task Loki-like chain (lokiLike, 15,667 flow columns) the accuracy step took 2.2 s listed and 0.33 s
// priced (same optimum, 64 and 57 nodes); the examples have at most 312 and stay listed.
var priceFlowColumns = 2000

// ErrModelTooLarge says a pipeline's allocation model exceeds MaxFlowColumns.
var ErrModelTooLarge = errors.New("allocate: the allocation model is too large")

// addFlowColumns adds constraint 7, exactly: a path carries traffic only at batch sizes whose latencies fit its
// budget together, so its flow is split over the combinations of batch sizes (one per hop, the last hop's open)
// that fit, a flow column each. Up to priceFlowColumns (MaxFlowColumns in the hardware step and for WriteLP) every
// combination is a column; past it, the accuracy and max-demand steps generate them as the LPs need them (pricer),
// starting from one per path.
func (m *model) addFlowColumns() error {
	p := m.prob
	m.firstFlowCol = p.NumCols()
	m.flowColByKey = map[string]int{}
	limit := flowColumnLimit
	if m.step != stepHardware && !m.in.listFlows {
		limit = min(limit, priceFlowColumns)
	}
	if m.countFlowColumns() <= limit {
		for _, pa := range m.paths {
			m.eachFlowBatches(pa, func(batches []int) bool {
				m.addFlowColumn(pa, batches)
				return true
			})
		}
		return nil
	}
	if m.step == stepHardware {
		return fmt.Errorf("%w: its %d paths of variants have more than %d combinations of batch sizes "+
			"that fit the SLO; allow fewer batch sizes or variants", ErrModelTooLarge, len(m.paths), MaxFlowColumns)
	}
	m.priced = true
	for _, pa := range m.paths {
		m.addFlowColumn(pa, m.fastestFlowBatches(pa)) // a first column per path
	}
	if m.step == stepAccuracy || m.step == stepFloor {
		// Unserved demand, at a prohibitive cost: it keeps the LP feasible while the pricer has not generated
		// the columns that serve it, and a node that still needs it when no column can help has no point. It
		// counts as served at full accuracy in the floor's row, so that the row alone never makes the LP infeasible.
		cost := -unservedCost
		if m.step == stepFloor {
			cost = unservedCost * m.heaviestServer()
		}
		for ci := range m.chains {
			terms := []milp.Term{{Col: m.chainDemandRow[ci], Coef: 1}}
			if m.minAccuracyRow >= 0 {
				terms = append(terms, milp.Term{Col: m.minAccuracyRow, Coef: m.chainShare[ci]})
			}
			m.unservedCols = append(m.unservedCols, p.AddColumn("unserved demand of chain "+
				strings.Join(m.chains[ci], "->"), cost, 0, milp.Inf, terms))
		}
	}
	return nil
}

// eachFlowBatches calls f with each combination of batch indexes (one per hop, the last hop's its threshold) whose
// latencies fit the path's budget, until f returns false.
func (m *model) eachFlowBatches(pa *path, f func(batches []int) bool) {
	batches := make([]int, len(pa.hops))
	last := len(pa.hops) - 1
	var rec func(i int, lat float64) bool
	rec = func(i int, lat float64) bool {
		if i == last {
			if batches[i] = m.threshold(pa, lat); batches[i] < 0 {
				return true
			}
			return f(batches)
		}
		for bi, l := range m.variants[pa.hops[i]].latencyMs {
			if lat+l+pa.fastestAfterMs[i] <= pa.budgetMs+1e-9 {
				batches[i] = bi
				if !rec(i+1, lat+l) {
					return false
				}
			}
		}
		return true
	}
	rec(0, 0)
}

// Constraint 7 on the last hop of a path, compactly. Once the batch sizes of the other hops are chosen, the last
// hop's variant may run at any batch size whose latency fits what is left of the budget: with its batch sizes in
// order of latency, a prefix of them, ending at a "threshold". One flow column per threshold (instead of one per
// batch size it allows) brings its load to the capacity row of the threshold's batch size, and the spill columns
// move load from each batch size's row to the next faster one's. Load can reach the capacity of a batch size
// exactly when the batch size is within its threshold, so a point of the model with a flow column per batch size
// maps onto this one and back (a transportation problem over nested sets), and the LP bound is the same. On the
// traffic example that is 312 flow columns instead of 1,733.
//
// threshold is the largest batch index of path pa's last hop that fits the budget after lat, the latency of the
// hops before it (-1 if none).
func (m *model) threshold(pa *path, lat float64) int {
	kv := m.variants[pa.hops[len(pa.hops)-1]]
	t := -1
	for bi, l := range kv.latencyMs { // in order of latency
		if lat+l <= pa.budgetMs+1e-9 {
			t = bi
		}
	}
	return t
}

// addSpillColumns adds the spill columns of each leaf variant: spillDownCol[bi] takes load off batch bi's capacity
// row and puts it on batch bi-1's, so that a flow column's load, brought to its threshold's row, may run at any
// faster batch size (see threshold).
func (m *model) addSpillColumns() {
	for _, kv := range m.variants {
		if !m.in.Spec.IsLeaf(kv.task) || len(kv.capacityRow) == 0 {
			continue
		}
		kv.spillDownCol = m.addSpills(kv, kv.capacityRow, "")
		for _, ci := range slices.Sorted(maps.Keys(kv.joinCapacity)) {
			jc := kv.joinCapacity[ci]
			jc.spillDownCol = m.addSpills(kv, jc.row, fmt.Sprintf(" (chain %d)", ci))
		}
	}
}

// addSpills adds the spill columns between the capacity rows rows of leaf variant kv, one per batch index from 1.
func (m *model) addSpills(kv *keptVariant, rows []int, suffix string) []int {
	cols := make([]int, len(kv.batches))
	for bi := 1; bi < len(kv.batches); bi++ {
		cols[bi] = m.prob.AddColumn(fmt.Sprintf("spill %s/%s@%s to @%s%s", kv.task, kv.variant.Name, kv.label(bi),
			kv.label(bi-1), suffix), 0, 0, milp.Inf, []milp.Term{{Col: rows[bi], Coef: -1}, {Col: rows[bi-1], Coef: 1}})
	}
	return cols
}

// capacityRowOf is the capacity row that hop i of path pa's flow columns enter at batch index bi: its variant's,
// on the reference chain of its task; the chain's own on a chain through a join ending at it (addJoinCapacity);
// none (false) otherwise.
func (m *model) capacityRowOf(pa *path, i, bi int) (int, bool) {
	kv := m.variants[pa.hops[i]]
	if pa.chain == m.refChain[kv.task] {
		return kv.capacityRow[bi], true
	}
	if jc := kv.joinCapacity[pa.chain]; jc != nil && i == len(pa.hops)-1 {
		return jc.row[bi], true
	}
	return 0, false
}

// carries says flow column c can carry traffic with each hop h at batch index batch(h).
func (m *model) carries(c *flowColumn, batch func(h int) int) bool {
	last := len(c.batches) - 1
	for i, h := range c.path.hops {
		b := batch(h)
		switch {
		case b < 0:
			return false
		case i == last:
			if b > c.batches[i] {
				return false
			}
		case b != c.batches[i]:
			return false
		}
	}
	return true
}

// fastestFlowBatches is the batch indexes of path pa with every hop but the last at its fastest batch size (it
// fits: the path exists), the last at its threshold.
func (m *model) fastestFlowBatches(pa *path) []int {
	batches := make([]int, len(pa.hops)) // index 0 is the fastest
	lat := 0.0
	for _, h := range pa.hops[:len(pa.hops)-1] {
		lat += m.variants[h].latencyMs[0]
	}
	batches[len(batches)-1] = m.threshold(pa, lat)
	return batches
}

// countFlowColumns is the number of flow columns the paths need.
func (m *model) countFlowColumns() int {
	total := 0
	for _, pa := range m.paths {
		m.eachFlowBatches(pa, func([]int) bool {
			total++
			return total <= flowColumnLimit // past it, the count no longer matters
		})
	}
	return total
}

// flowObjective is the objective coefficient of a flow column of path pa.
func (m *model) flowObjective(pa *path) float64 {
	switch m.step {
	case stepAccuracy:
		return m.chainShare[pa.chain] * pa.accuracy / m.in.Demand
	case stepFloor:
		return -m.floorTieBreak * m.chainShare[pa.chain] * pa.accuracy / m.in.Demand
	}
	return 0
}

// flowTerms is a flow column's coefficients: in its chain's demand row, the capacity rows of its hops at their
// batch sizes (on the reference chain of each hop's task), the agreement rows and the minimum accuracy row.
func (m *model) flowTerms(pa *path, batches []int) []milp.Term {
	terms := []milp.Term{{Col: m.chainDemandRow[pa.chain], Coef: 1}}
	for i := range pa.hops {
		if row, ok := m.capacityRowOf(pa, i, batches[i]); ok {
			terms = append(terms, milp.Term{Col: row, Coef: pa.itemsPerRequest[i]})
		}
	}
	for _, pr := range m.agreements {
		if rows, ok := pr.rows[pr.key(pa.hops, batches)]; ok {
			if pa.chain == pr.ref {
				for _, r := range rows {
					terms = append(terms, milp.Term{Col: r, Coef: 1})
				}
			} else if k := slices.Index(pr.others, pa.chain); k >= 0 {
				terms = append(terms, milp.Term{Col: rows[k], Coef: -1})
			}
		}
	}
	if m.minAccuracyRow >= 0 {
		terms = append(terms, milp.Term{Col: m.minAccuracyRow, Coef: m.chainShare[pa.chain] * pa.accuracy})
	}
	return terms
}

// addFlowColumn adds the flow column of path pa at batch indexes batches (copied).
func (m *model) addFlowColumn(pa *path, batches []int) *flowColumn {
	c := &flowColumn{path: pa, batches: append([]int(nil), batches...)}
	c.col = m.prob.AddColumn("flow "+m.flowName(c), m.flowObjective(pa), 0, milp.Inf, m.flowTerms(pa, c.batches))
	m.flows = append(m.flows, c)
	m.flowColByKey[flowKey(pa, c.batches)] = c.col
	return c
}

// flowKey identifies the flow column of path pa at batch indexes batches.
func flowKey(pa *path, batches []int) string {
	key := binary.AppendUvarint(make([]byte, 0, 2+len(batches)), uint64(pa.id))
	for _, b := range batches {
		key = binary.AppendUvarint(key, uint64(b))
	}
	return string(key)
}

func (m *model) flowName(c *flowColumn) string { return m.hopsName(c.path.hops, c.batches) }

// hopsName names variants hops at batch indexes batches: "task/variant@batch,...".
func (m *model) hopsName(hops, batches []int) string {
	all := make([]int, len(hops))
	for i := range all {
		all[i] = i
	}
	return m.hopsNameAt(hops, batches, all)
}

// hopsNameAt is hopsName of the hops at positions.
func (m *model) hopsNameAt(hops, batches, positions []int) string {
	var b strings.Builder
	for n, i := range positions {
		if n > 0 {
			b.WriteByte(',')
		}
		h := hops[i]
		kv := m.variants[h]
		b.WriteString(kv.task)
		b.WriteByte('/')
		b.WriteString(kv.variant.Name)
		b.WriteByte('@')
		b.WriteString(kv.label(batches[i]))
	}
	return b.String()
}

func (m *model) pathName(pa *path) string {
	names := make([]string, len(pa.hops))
	for i, h := range pa.hops {
		names[i] = wire.VariantKey{Task: m.variants[h].task, Variant: m.variants[h].variant.Name}.String()
	}
	return strings.Join(names, ",")
}

func slicesMin(s []float64) float64 {
	m := math.Inf(1)
	for _, v := range s {
		m = min(m, v)
	}
	return m
}

func slicesMax(s []float64) float64 {
	m := math.Inf(-1)
	for _, v := range s {
		m = max(m, v)
	}
	return m
}
