// Package allocate is Loki's resource manager (section 4.1 of the paper): which model variants to host, with how
// many replicas and which maximum batch size, so that the cluster serves the demand with the fewest servers at full
// accuracy (hardware scaling) or, when it cannot, with the highest system accuracy (accuracy scaling). It builds the
// MILP and solves it with pkg/milp. Pure: no NATS; the planner service and the plan command call it.
package allocate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// Input is one allocation problem.
type Input struct {
	Spec *pipeline.Spec
	// Demand is the request rate at the root task, in requests per second.
	Demand float64
	// Servers is the cluster size: how many workers (one variant replica each) there are.
	Servers int
	// SLOMs overrides the spec's SLO when positive.
	SLOMs float64
	// Fanout optionally overrides multiplicative factors ("task/variant" -> factor), e.g. with what workers
	// measure; the profile's factor is the prior.
	Fanout map[string]pipeline.Fanout
	// MinAccuracy is an optional floor on the system accuracy in accuracy scaling.
	MinAccuracy float64
	// Utilization is the share of each replica's profiled throughput the plan may use (0 means 1, the paper's
	// formulation). The planner passes its routing's utilization, so that the plan leaves the headroom the routing
	// keeps: a replica fed at its full service rate has an unbounded queue.
	Utilization float64
	// headroomDemand, when positive, is the demand at which the accuracy and max-demand steps spread headroom
	// (spreadHeadroom) instead of Demand: the allocation of an overloaded cluster's servable demand uses the
	// demand asked for, as the max-demand step that found it did.
	headroomDemand float64
}

// utilization is the share of throughput a plan may use.
func (in Input) utilization() float64 {
	if in.Utilization <= 0 || in.Utilization > 1 {
		return 1
	}
	return in.Utilization
}

// step is which of the MILPs a model is.
type step int

const (
	stepHardware  step = iota // most accurate variants only; minimise servers
	stepAccuracy              // every variant; maximise system accuracy
	stepMaxDemand             // every variant; maximise the demand served
)

// variant is a variant kept by presolve, with its allowed batch sizes.
type variant struct {
	task    string
	v       *pipeline.Variant
	batches []int     // allowed maximum batch sizes after presolve
	lat     []float64 // latency (ms) the plan budgets per allowed batch: the p50 times a burst's rounds (see burst)
	p50     []float64 // p50 latency (ms) of one batch per allowed batch
	// rounds is, per allowed batch, the batches a typical burst takes, and minN the replicas that needs (see
	// burstOptions): a batch size may be allowed several times, with fewer rounds on more replicas.
	rounds []int
	minN   []float64
	// h is, per allowed batch, the load (items/s) its replicas keep free for queueing (see headroom).
	h []float64
	q []float64 // throughput (items/s of one replica) per allowed batch
	// columns: batch choice and replicas per allowed batch; total is the replicas over every batch (-1 when
	// the variant has no columns)
	z, n  []int
	total int
	// capRow is the capacity row per allowed batch.
	capRow []int
	// spill[bi] (bi >= 1) moves load a leaf variant's flow columns bring to batch bi down to batch bi-1 (see
	// threshold: a leaf task ends its chains, and the flow columns leave its batch size open).
	spill []int
}

// path is a root-to-leaf path of variants through one chain.
type path struct {
	id       int // index in model.paths
	chain    int
	hops     []int     // indexes into model.variants, one per task of the chain
	mult     []float64 // items reaching hop i per request entering the path
	accuracy float64
	maxLat   float64 // the chain's latency budget
	// fastestAfter[i] is the least latency of the hops after hop i.
	fastestAfter []float64
}

// combo is a path with a batch size per hop whose latencies fit the path's budget together: a flow column. The
// last hop's entry is the largest batch index the others leave room for; its traffic may run at any batch index
// up to it (see threshold).
type combo struct {
	path    *path
	batches []int // batch index (into the hop variant's batches) per hop
	col     int
}

// model is the MILP of one step, with what is needed to read its solution back.
type model struct {
	in       Input
	step     step
	prob     *milp.Problem
	variants []*variant
	paths    []*path
	chains   [][]string
	weights  []float64 // per chain: its share of the leaf traffic
	refChain map[string]int
	demand   int // the column of the demand served
	budget   []float64
	combos   []*combo
	loadUB   []float64 // per variant: the most traffic that can reach it
	// taskServers is the column of the servers of each task (see addAggregates).
	taskServers map[string]int
	// Rows that flow columns enter (see comboTerms); minAccuracyRow is -1 when there is none.
	demandRow      []int
	prefixes       []prefixRows
	minAccuracyRow int
	// firstFlow is the first flow column; comboCols the column of each combination by comboKey.
	firstFlow int
	comboCols map[string]int
	// priced says flow columns are generated as the LPs need them (see pricer); unserved are then the columns of
	// the accuracy step's unserved demand, per chain.
	priced   bool
	unserved []int
}

// fanout is the multiplicative factor from a variant of task to one child task.
func (in Input) fanout(task string, v *pipeline.Variant, child string) float64 {
	f := v.Fanout
	if o, ok := in.Fanout[task+"/"+v.Name]; ok {
		f = &o
	}
	if f == nil {
		return 0
	}
	if len(f.Shares) == 0 {
		return f.Mean
	}
	return f.Mean * f.Shares[child]
}

// chainBudget is the execution time a chain's variants may take: half the SLO (the other half is left for queueing,
// as Loki does) minus the communication latency of its hops.
func (in Input) chainBudget(chain []string) float64 {
	slo := in.Spec.SLOMs
	if in.SLOMs > 0 {
		slo = in.SLOMs
	}
	return slo/2 - in.Spec.CommLatencyMs*float64(len(chain))
}

// build writes the MILP of one step. demandUB bounds the demand column in stepMaxDemand.
func build(in Input, st step) (*model, error) {
	spec := in.Spec
	m := &model{in: in, step: st, prob: &milp.Problem{}, chains: spec.Chains(), refChain: map[string]int{}}
	for ci, chain := range m.chains {
		m.budget = append(m.budget, in.chainBudget(chain))
		for _, t := range chain {
			if _, ok := m.refChain[t]; !ok {
				m.refChain[t] = ci
			}
		}
	}
	m.weights = chainWeights(in, m.chains)

	// Presolve, per variant: the fastest latency of each task bounds what the others may take.
	fastest := map[string]float64{}
	for _, t := range spec.Tasks {
		best := math.Inf(1)
		for vi := range t.Variants {
			for _, p := range t.Variants[vi].Profile {
				best = min(best, p.P50Ms)
			}
		}
		fastest[t.Name] = best
	}
	slowest := in.slowestHops(st)
	for ti := range spec.Tasks {
		t := &spec.Tasks[ti]
		top := t.MostAccurate().Accuracy
		for vi := range t.Variants {
			v := &t.Variants[vi]
			if st == stepHardware && v.Accuracy < top {
				continue // constraint 10: only the most accurate variants in hardware scaling
			}
			kv := &variant{task: t.Name, v: v}
			arr := in.arrivalsOf(t.Name, st)
			for _, b := range spec.BatchSizes {
				p, ok := v.Point(b)
				if !ok {
					continue
				}
				for _, o := range burstOptions(arr.burst(), b, in.Servers) {
					lat := p.P50Ms * float64(o.rounds)
					if !fitsSomeChain(m, t.Name, lat, fastest) {
						continue
					}
					kv.batches = append(kv.batches, b)
					kv.rounds = append(kv.rounds, o.rounds)
					kv.minN = append(kv.minN, float64(o.replicas))
					kv.h = append(kv.h, arr.headroom(p.P50Ms, m.waitAllowance(t.Name, lat, slowest)))
					kv.lat = append(kv.lat, lat)
					kv.p50 = append(kv.p50, p.P50Ms)
					kv.q = append(kv.q, in.utilization()*float64(b)/(p.P50Ms/1000))
				}
			}
			dropDominatedBatches(kv)
			if len(kv.batches) == 0 {
				continue
			}
			m.variants = append(m.variants, kv)
		}
	}

	// Paths: every combination of kept variants along each chain whose fastest latency fits the chain's budget.
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
	// A variant on no path cannot be used.
	used := make([]bool, len(m.variants))
	for _, p := range m.paths {
		for _, h := range p.hops {
			used[h] = true
		}
	}
	for ci := range m.chains {
		has := false
		for _, p := range m.paths {
			has = has || p.chain == ci
		}
		if !has {
			return nil, fmt.Errorf("no path of variants of chain %s fits its latency budget of %.1f ms (half the SLO, "+
				"less %.1f ms per hop)", strings.Join(m.chains[ci], "->"), m.budget[ci], spec.CommLatencyMs)
		}
	}

	// Columns.
	p := m.prob
	demandUB := in.Demand
	if st == stepMaxDemand {
		p.Sense = milp.Maximize
		demandUB = m.demandBound()
		m.demand = p.AddCol("demand", 1, 0, demandUB, false, 0)
	} else {
		m.demand = p.AddCol("demand", 0, in.Demand, in.Demand, false, 0)
	}
	if st == stepAccuracy {
		p.Sense = milp.Maximize
	}
	m.loadUB = m.loadBounds(demandUB)
	if st != stepHardware {
		m.spreadHeadroom()
	}
	for k, kv := range m.variants {
		if !used[k] {
			continue
		}
		for bi := range kv.batches {
			name := kv.task + "/" + kv.v.Name + "@" + kv.label(bi)
			// Batch choices and replica counts are branched on alike, after the servers of each task (addAggregates):
			// on the examples that closes the gap in fewer nodes than taking every batch choice first.
			kv.z = append(kv.z, p.AddCol("use "+name, 0, 0, 1, true, prioBatch))
			kv.n = append(kv.n, p.AddCol("replicas "+name, 0, 0, m.replicaBound(k, bi), true, prioBatch))
			if st == stepHardware {
				p.Obj[kv.n[bi]] = 1
			}
		}
	}

	// Rows, with no flow columns yet: addCombo puts each in the rows it belongs to.
	for ci := range m.chains {
		m.demandRow = append(m.demandRow, p.AddRow("demand of chain "+strings.Join(m.chains[ci], "->"), 0, 0,
			milp.Term{Col: m.demand, Coef: -1}))
	}
	m.addPrefixAgreement()
	var servers []milp.Term
	for _, kv := range m.variants {
		if len(kv.z) == 0 {
			continue
		}
		var one []milp.Term
		for bi := range kv.batches {
			// Constraint 2 at the chosen batch size: the traffic reaching the variant (through its task's reference
			// chain) at this batch size fits its replicas there.
			kv.capRow = append(kv.capRow, p.AddRow("capacity of "+kv.task+"/"+kv.v.Name+"@"+kv.label(bi),
				math.Inf(-1), 0, milp.Term{Col: kv.n[bi], Coef: -kv.q[bi]}, milp.Term{Col: kv.z[bi], Coef: kv.h[bi]}))
			// Replicas only at the chosen batch size, and at least as many as its burst's rounds need.
			p.AddRow("replicas at the chosen batch", math.Inf(-1), 0,
				milp.Term{Col: kv.n[bi], Coef: 1}, milp.Term{Col: kv.z[bi], Coef: -p.Upper[kv.n[bi]]})
			m.addBurstReplicas(p, kv, bi)
			one = append(one, milp.Term{Col: kv.z[bi], Coef: 1})
			servers = append(servers, milp.Term{Col: kv.n[bi], Coef: 1})
		}
		p.AddRow("one batch size of "+kv.task+"/"+kv.v.Name, math.Inf(-1), 1, one...)
	}
	p.AddRow("servers", math.Inf(-1), float64(in.Servers), servers...)
	m.addAggregates()
	m.addReplicaPerTask(p)
	m.minAccuracyRow = -1
	if in.MinAccuracy > 0 && st == stepAccuracy {
		m.minAccuracyRow = p.AddRow("minimum accuracy", 0, math.Inf(1), milp.Term{Col: m.demand, Coef: -in.MinAccuracy})
	}

	// Constraint 7, exactly: a path carries traffic only at batch sizes whose latencies fit its budget together, so
	// its flow is split over the combinations of batch sizes (one per hop, the last hop's open) that fit. Below
	// MaxFlowColumns every combination is a column; above, the accuracy and max-demand steps generate them as the
	// LPs need them.
	m.firstFlow = p.NumCols()
	m.comboCols = map[string]int{}
	if m.countCombos() <= flowColumnLimit {
		for _, pa := range m.paths {
			m.eachCombo(pa, func(batches []int) bool {
				m.addCombo(pa, batches)
				return true
			})
		}
	} else {
		if st == stepHardware {
			return nil, fmt.Errorf("%w: its %d paths of variants have more than %d combinations of batch sizes "+
				"that fit the SLO; allow fewer batch sizes or variants", ErrModelTooLarge, len(m.paths), MaxFlowColumns)
		}
		m.priced = true
		for _, pa := range m.paths {
			m.addCombo(pa, m.fastestCombo(pa)) // a first column per path
		}
		if st == stepAccuracy {
			// Unserved demand, at a prohibitive cost: it keeps the LP feasible while the pricer has not generated
			// the columns that serve it, and a node that still needs it when no column can help has no point.
			for ci := range m.chains {
				m.unserved = append(m.unserved, p.AddColumn("unserved demand of chain "+strings.Join(m.chains[ci], "->"),
					-unservedCost, 0, milp.Inf, []milp.Term{{Col: m.demandRow[ci], Coef: 1}}))
			}
		}
	}
	m.addSpills()
	return m, nil
}

// addSpills adds the spill columns of the leaf variants (see threshold).
func (m *model) addSpills() {
	for _, kv := range m.variants {
		if !m.in.Spec.IsLeaf(kv.task) || len(kv.capRow) == 0 {
			continue
		}
		kv.spill = make([]int, len(kv.batches))
		for bi := 1; bi < len(kv.batches); bi++ {
			kv.spill[bi] = m.prob.AddColumn(fmt.Sprintf("spill %s/%s@%s to @%s", kv.task, kv.v.Name, kv.label(bi),
				kv.label(bi-1)), 0, 0, milp.Inf, []milp.Term{{Col: kv.capRow[bi], Coef: -1},
				{Col: kv.capRow[bi-1], Coef: 1}})
		}
	}
}

// setSpills sets the spill columns of x to carry the load of its flow columns to its replicas: the load arriving at
// each batch index, from the slowest down, runs there as far as the replicas there allow, and the rest moves on
// to the next faster batch size (the best order: load that may use a batch size may use every faster one too).
func (m *model) setSpills(x []float64) {
	arriving := map[int]float64{} // capacity row -> load
	for _, c := range m.combos {
		last := len(c.batches) - 1
		kv := m.variants[c.path.hops[last]]
		arriving[kv.capRow[c.batches[last]]] += c.path.mult[last] * x[c.col]
	}
	for _, kv := range m.variants {
		if kv.spill == nil {
			continue
		}
		carry := 0.0
		for bi := len(kv.batches) - 1; bi >= 1; bi-- {
			carry = max(0, carry+arriving[kv.capRow[bi]]-kv.absorbs(bi, x[kv.n[bi]], x[kv.z[bi]]))
			x[kv.spill[bi]] = carry
		}
	}
}

// unservedCost is the objective cost of one request per second of unserved demand in a priced accuracy step: far
// above what serving it could be worth (the system accuracy is at most 1), so the LP uses it only when it must.
const unservedCost = 1e4

// eachCombo calls f with each combination of batch indexes (one per hop, the last hop's its threshold) whose
// latencies fit the path's budget, until f returns false.
func (m *model) eachCombo(pa *path, f func(batches []int) bool) {
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
		for bi, l := range m.variants[pa.hops[i]].lat {
			if lat+l+pa.fastestAfter[i] <= pa.maxLat+1e-9 {
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
	for bi, l := range kv.lat { // in order of latency
		if lat+l <= pa.maxLat+1e-9 {
			t = bi
		}
	}
	return t
}

// carries says combination c can carry traffic with each hop h at batch index batch(h).
func (m *model) carries(c *combo, batch func(h int) int) bool {
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

// fastestCombo is the combination of path pa with every hop but the last at its fastest batch size (it fits: the
// path exists).
func (m *model) fastestCombo(pa *path) []int {
	batches := make([]int, len(pa.hops)) // index 0 is the fastest
	lat := 0.0
	for _, h := range pa.hops[:len(pa.hops)-1] {
		lat += m.variants[h].lat[0]
	}
	batches[len(batches)-1] = m.threshold(pa, lat)
	return batches
}

// comboObj is the objective coefficient of a flow column of path pa.
func (m *model) comboObj(pa *path) float64 {
	if m.step == stepAccuracy {
		return m.weights[pa.chain] * pa.accuracy / m.in.Demand
	}
	return 0
}

// comboTerms is a flow column's coefficients: in its chain's demand row, the capacity rows of its hops at their
// batch sizes (on the reference chain of each hop's task), the prefix agreement rows and the minimum accuracy row.
func (m *model) comboTerms(pa *path, batches []int) []milp.Term {
	terms := []milp.Term{{Col: m.demandRow[pa.chain], Coef: 1}}
	for i, h := range pa.hops {
		kv := m.variants[h]
		if pa.chain == m.refChain[kv.task] {
			terms = append(terms, milp.Term{Col: kv.capRow[batches[i]], Coef: pa.mult[i]})
		}
	}
	for _, pr := range m.prefixes {
		if rows, ok := pr.rows[prefixKey(pa.hops[:pr.depth], batches[:pr.depth])]; ok {
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
		terms = append(terms, milp.Term{Col: m.minAccuracyRow, Coef: m.weights[pa.chain] * pa.accuracy})
	}
	return terms
}

// addCombo adds the flow column of path pa at batch indexes batches (copied).
func (m *model) addCombo(pa *path, batches []int) *combo {
	c := &combo{path: pa, batches: append([]int(nil), batches...)}
	c.col = m.prob.AddColumn("flow "+m.comboName(c), m.comboObj(pa), 0, milp.Inf, m.comboTerms(pa, c.batches))
	m.combos = append(m.combos, c)
	m.comboCols[comboKey(pa, c.batches)] = c.col
	return c
}

// Branching priorities: the servers of a task first; then, alike, the replicas of a variant, batch choices and
// replicas per batch size.
const (
	prioBatch = 2
	prioTask  = 4
)

// addAggregates adds integer columns for the servers of each task, branched on first, and the replicas of each
// variant (over its batch sizes). Branching on a per-batch replica count alone barely moves the LP bound, which
// shifts the fraction to another batch size or variant of the same task; "task t has at most 9 servers, or at least
// 10" cannot be dodged that way. With pseudo-cost branching, taking the aggregates first cut the nodes to prove an
// accuracy-scaling optimum on the traffic example at 400-900 QPS from 739 to more than 12,000 down to 43-1,292.
// With reliability branching (pkg/milp), which measures what each candidate's branches would gain, the variants'
// replicas do better competing with the per-batch columns than preceding them: on the traffic example at eight
// demands of 400-900 QPS, 19-291 nodes where the variants first took 26-871 (measured while choosing the
// strong-branching limits).
func (m *model) addAggregates() {
	p := m.prob
	m.taskServers = map[string]int{}
	for _, kv := range m.variants {
		kv.total = -1
	}
	for _, t := range m.in.Spec.Tasks {
		var task []milp.Term
		for _, kv := range m.variants {
			if kv.task != t.Name || len(kv.n) == 0 {
				continue
			}
			var replicas []milp.Term
			for _, n := range kv.n {
				replicas = append(replicas, milp.Term{Col: n, Coef: 1})
			}
			task = append(task, replicas...)
			kv.total = p.AddCol("replicas of "+t.Name+"/"+kv.v.Name, 0, 0, float64(m.in.Servers), true, prioBatch)
			p.AddRow("replicas of "+t.Name+"/"+kv.v.Name, 0, 0, append(replicas, milp.Term{Col: kv.total, Coef: -1})...)
		}
		if len(task) > 0 {
			c := p.AddCol("servers of "+t.Name, 0, 0, float64(m.in.Servers), true, prioTask)
			p.AddRow("servers of "+t.Name, 0, 0, append(task, milp.Term{Col: c, Coef: -1})...)
			m.taskServers[t.Name] = c
		}
	}
}

// addReplicaPerTask adds to p, when there is demand to serve, a row per task its requests reach: at least one
// replica (a valid cut: it closes the LP bound of allocations that spread fractions of servers over every task).
func (m *model) addReplicaPerTask(p *milp.Problem) {
	if m.step == stepMaxDemand || m.in.Demand <= 0 {
		return
	}
	for _, t := range m.in.Spec.Tasks {
		if !m.reached(t.Name) {
			continue
		}
		var terms []milp.Term
		for _, kv := range m.variants {
			if kv.task == t.Name {
				for _, n := range kv.n {
					terms = append(terms, milp.Term{Col: n, Coef: 1})
				}
			}
		}
		if len(terms) > 0 {
			p.AddRow("a replica of "+t.Name, 1, math.Inf(1), terms...)
		}
	}
}

// fillAggregates sets the aggregate columns of x from its replica columns.
func (m *model) fillAggregates(x []float64) {
	for _, c := range m.taskServers {
		x[c] = 0
	}
	for _, kv := range m.variants {
		if kv.total < 0 {
			continue
		}
		x[kv.total] = 0
		for _, n := range kv.n {
			x[kv.total] += x[n]
		}
		x[m.taskServers[kv.task]] += x[kv.total]
	}
}

// MaxFlowColumns is how many flow columns (one per path of variants and combination of batch sizes that fits the
// path's latency budget, the last hop's left open: see threshold) a model lists up front. They grow as
// variants^tasks * batches^(tasks-1): the 3-task traffic example has 312; a 4-task chain with 6 variants and 7 batch
// sizes per task would have about 280,000 (gigabytes to build). Past it, the accuracy and max-demand steps generate
// them as the LPs need them (branch-and-price), and the hardware step, one path per chain, fails with
// ErrModelTooLarge.
const MaxFlowColumns = 20000

// flowColumnLimit is MaxFlowColumns, lowered by tests to make small models priced.
var flowColumnLimit = MaxFlowColumns

// ErrModelTooLarge says a pipeline's allocation model exceeds MaxFlowColumns.
var ErrModelTooLarge = errors.New("allocate: the allocation model is too large")

// countCombos is the number of flow columns the paths need.
func (m *model) countCombos() int {
	total := 0
	for _, pa := range m.paths {
		m.eachCombo(pa, func([]int) bool {
			total++
			return total <= flowColumnLimit // past it, the count no longer matters
		})
	}
	return total
}

// reached says every path of the task's reference chain brings it traffic (no variant above it emits nothing).
func (m *model) reached(task string) bool {
	for _, pa := range m.paths {
		if pa.chain != m.refChain[task] {
			continue
		}
		for i, h := range pa.hops {
			if m.variants[h].task == task && pa.mult[i] <= 0 {
				return false
			}
		}
	}
	return true
}

// replicaBound is the most replicas variant k can use at batch index bi: enough for the most traffic that can reach
// it, and never more than the cluster (a tight bound keeps the LP's "replicas at the chosen batch" rows strong).
func (m *model) replicaBound(k, bi int) float64 {
	ub := float64(m.in.Servers)
	if m.step != stepMaxDemand {
		ub = min(ub, float64(m.variants[k].replicasFor(bi, m.loadUB[k])))
	}
	return max(ub, 0)
}

// fitsSomeChain says a variant of task running at latency lat leaves a chain through the task within its budget
// with every other task at its fastest.
func fitsSomeChain(m *model, task string, lat float64, fastest map[string]float64) bool {
	for ci, chain := range m.chains {
		total, on := 0.0, false
		for _, t := range chain {
			if t == task {
				on = true
				total += lat
			} else {
				total += fastest[t]
			}
		}
		if on && total <= m.budget[ci]+1e-9 {
			return true
		}
	}
	return false
}

// dropDominatedBatches removes batch sizes another batch size beats on both latency and throughput: a solution
// using one could use the other and stay feasible. The batch sizes kept are put in order of latency (threshold
// relies on it). A burst's rounds (see burst) can make a larger batch faster than a smaller one; it then has the
// higher throughput too, and the smaller one goes.
func dropDominatedBatches(kv *variant) {
	var keep []int
	for i := range kv.batches {
		dominated := false
		for j := range kv.batches {
			if j == i {
				continue
			}
			better := kv.lat[j] <= kv.lat[i] && kv.q[j] >= kv.q[i] && kv.minN[j] <= kv.minN[i] && kv.h[j] <= kv.h[i]
			strictly := kv.lat[j] < kv.lat[i] || kv.q[j] > kv.q[i] || kv.minN[j] < kv.minN[i] || kv.h[j] < kv.h[i] ||
				j < i
			if better && strictly {
				dominated = true
				break
			}
		}
		if !dominated {
			keep = append(keep, i)
		}
	}
	sort.SliceStable(keep, func(a, b int) bool { return kv.lat[keep[a]] < kv.lat[keep[b]] })
	pick := func(s []float64) []float64 {
		out := make([]float64, len(keep))
		for k, i := range keep {
			out[k] = s[i]
		}
		return out
	}
	batches, rounds := make([]int, len(keep)), make([]int, len(keep))
	for k, i := range keep {
		batches[k], rounds[k] = kv.batches[i], kv.rounds[i]
	}
	kv.lat, kv.p50, kv.q, kv.minN, kv.h = pick(kv.lat), pick(kv.p50), pick(kv.q), pick(kv.minN), pick(kv.h)
	kv.batches, kv.rounds = batches, rounds
}

// addPath adds the path of variants hops along chain ci if its fastest latency fits the chain's budget.
func (m *model) addPath(ci int, hops []int) {
	chain := m.chains[ci]
	pa := &path{id: len(m.paths), chain: ci, hops: hops, maxLat: m.budget[ci], fastestAfter: make([]float64, len(hops))}
	for i := len(hops) - 2; i >= 0; i-- {
		pa.fastestAfter[i] = pa.fastestAfter[i+1] + slicesMin(m.variants[hops[i+1]].lat)
	}
	if slicesMin(m.variants[hops[0]].lat)+pa.fastestAfter[0] > pa.maxLat+1e-9 {
		return
	}
	mult := 1.0
	names := make([]string, len(hops))
	for i, h := range hops {
		pa.mult = append(pa.mult, mult)
		kv := m.variants[h]
		names[i] = kv.task + "/" + kv.v.Name
		if i+1 < len(hops) {
			mult *= m.in.fanout(kv.task, kv.v, chain[i+1])
		}
	}
	pa.accuracy = m.in.Spec.PathAccuracyOf(names)
	m.paths = append(m.paths, pa)
}

// chainsThrough is the chains through task and the number of tasks from the root to it, inclusive.
func (m *model) chainsThrough(task string) (through []int, depth int) {
	for ci, chain := range m.chains {
		for i, name := range chain {
			if name == task {
				through = append(through, ci)
				depth = i + 1
			}
		}
	}
	return through, depth
}

// prefixRows are the agreement rows of one task with several children: chains that share the prefix of tasks from
// the root to it must route the same traffic through each assignment of variants and batch sizes to that prefix as
// the first chain through it (ref) does. rows[key][k] is the row of chain others[k] for prefix key.
type prefixRows struct {
	depth  int
	ref    int
	others []int
	rows   map[string][]int
}

// prefixKey identifies hops at batch indexes: a map key, cheap to build (the pricer's search builds one per step).
func prefixKey(hops, batches []int) string {
	key := make([]byte, 0, 2*len(hops))
	for i := range hops {
		key = binary.AppendUvarint(binary.AppendUvarint(key, uint64(hops[i])), uint64(batches[i]))
	}
	return string(key)
}

// comboKey identifies the combination of path pa at batch indexes batches.
func comboKey(pa *path, batches []int) string {
	key := binary.AppendUvarint(make([]byte, 0, 2+len(batches)), uint64(pa.id))
	for _, b := range batches {
		key = binary.AppendUvarint(key, uint64(b))
	}
	return string(key)
}

// addPrefixAgreement adds the rows of prefixRows, for every prefix of variants and batch sizes that fits, with no
// flow columns yet.
func (m *model) addPrefixAgreement() {
	for _, t := range m.in.Spec.Tasks {
		if len(t.Children) < 2 {
			continue
		}
		through, depth := m.chainsThrough(t.Name)
		pr := prefixRows{depth: depth, ref: through[0], others: through[1:], rows: map[string][]int{}}
		var keys []string
		names := map[string]string{} // row names, readable
		for _, pa := range m.paths {
			if !slices.Contains(through, pa.chain) {
				continue
			}
			// The batch combinations of the prefix that some combination of the whole path extends (a prefix
			// only another chain can take still gets its rows: they keep that chain's flow through it at 0).
			m.eachCombo(pa, func(batches []int) bool {
				key := prefixKey(pa.hops[:depth], batches[:depth])
				if _, ok := pr.rows[key]; !ok {
					pr.rows[key] = nil
					keys = append(keys, key)
					names[key] = m.hopsName(pa.hops[:depth], batches[:depth])
				}
				return true
			})
		}
		sort.Strings(keys)
		for _, key := range keys {
			for range pr.others {
				pr.rows[key] = append(pr.rows[key], m.prob.AddRow("shared prefix "+names[key], 0, 0))
			}
		}
		m.prefixes = append(m.prefixes, pr)
	}
}

// loadBounds is, per variant, the most traffic that can reach it when the root demand is d.
func (m *model) loadBounds(d float64) []float64 {
	ub := make([]float64, len(m.variants))
	for _, pa := range m.paths {
		for i, h := range pa.hops {
			ub[h] = max(ub[h], d*pa.mult[i])
		}
	}
	return ub
}

// demandBound bounds the demand the whole cluster could serve: every server on the root task at its best
// throughput.
func (m *model) demandBound() float64 {
	best := 0.0
	root := m.in.Spec.Root().Name
	for _, kv := range m.variants {
		if kv.task == root {
			best = max(best, slicesMax(kv.q))
		}
	}
	return best * float64(m.in.Servers)
}

func (m *model) comboName(c *combo) string { return m.hopsName(c.path.hops, c.batches) }

// hopsName names variants hops at batch indexes batches: "task/variant@batch,...".
func (m *model) hopsName(hops, batches []int) string {
	var b strings.Builder
	for i, h := range hops {
		if i > 0 {
			b.WriteByte(',')
		}
		kv := m.variants[h]
		b.WriteString(kv.task)
		b.WriteByte('/')
		b.WriteString(kv.v.Name)
		b.WriteByte('@')
		b.WriteString(kv.label(batches[i]))
	}
	return b.String()
}

func (m *model) pathName(pa *path) string {
	names := make([]string, len(pa.hops))
	for i, h := range pa.hops {
		names[i] = m.variants[h].task + "/" + m.variants[h].v.Name
	}
	return strings.Join(names, ",")
}

// chainWeights is each chain's share of the leaf traffic, from the multiplicative factors of the most accurate
// variants (the traffic a request sends down each chain at full accuracy).
func chainWeights(in Input, chains [][]string) []float64 {
	w := make([]float64, len(chains))
	total := 0.0
	for ci, chain := range chains {
		f := 1.0
		for i := 0; i+1 < len(chain); i++ {
			t := in.Spec.Task(chain[i])
			f *= in.fanout(t.Name, t.MostAccurate(), chain[i+1])
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
