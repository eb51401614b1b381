package allocate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// Modes of an allocation (the plan's).
const (
	ModeHardware   = plan.ModeHardware
	ModeAccuracy   = plan.ModeAccuracy
	ModeOverloaded = plan.ModeOverloaded
)

// Options tune the solver.
type Options struct {
	// TimeLimit bounds each MILP solve (0: none); a solve that hits it reports Optimal false and its Gap.
	TimeLimit time.Duration
	// MaxServable also computes MaxServableQPS when the demand is servable (it always is when it is not).
	MaxServable bool
	// Workers is how many branch-and-bound nodes are solved at once (0: runtime.GOMAXPROCS, one per CPU). With
	// more than one, which of several equally good allocations is returned may vary from run to run.
	Workers int
	// Gap is the optimality tolerance of each MILP solve, relative: a result is Optimal when no allocation can beat
	// it by more than this share of its objective. 0 means pkg/milp's default, 1e-6; it must be below 1.
	Gap float64
}

// check says what is wrong with o, if anything.
func (o Options) check() error {
	if !(o.Gap >= 0 && o.Gap < 1) {
		return fmt.Errorf("allocate: optimality gap %v: want a share in [0, 1)", o.Gap)
	}
	return nil
}

// workers is Workers, or one per CPU.
func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Hosted is one hosted variant of an allocation.
type Hosted struct {
	Task        string  `json:"task"`
	Variant     string  `json:"variant"`
	Replicas    int     `json:"replicas"`
	BatchSize   int     `json:"batch_size"`
	LatencyMs   float64 `json:"latency_ms"`
	CapacityQPS float64 `json:"capacity_qps"`
	LoadQPS     float64 `json:"load_qps"`
}

// Result is an allocation.
type Result struct {
	Mode           string  `json:"mode"`
	Demand         float64 `json:"demand_qps"`
	Servers        int     `json:"servers"`
	ServersUsed    int     `json:"servers_used"`
	SystemAccuracy float64 `json:"system_accuracy"`
	// MaxServableQPS is the largest demand these servers can serve (0 when not computed).
	MaxServableQPS float64 `json:"max_servable_qps,omitempty"`
	// ServedQPS is the demand the allocation serves: Demand, or MaxServableQPS when overloaded.
	ServedQPS float64 `json:"served_qps"`
	// Optimal says every MILP solve was proven optimal within Options.Gap; when not (a time limit), Gap is how far
	// from optimal the allocation may be.
	Optimal  bool     `json:"optimal"`
	Gap      float64  `json:"gap"`
	SolveMs  float64  `json:"solve_ms"`
	Nodes    int      `json:"nodes"`
	Variants []Hosted `json:"variants"`
}

// ErrNoServers says the cluster has no servers to allocate.
var ErrNoServers = errors.New("allocate: the cluster has no servers")

// Solve allocates the cluster: hardware scaling if the most accurate variants can serve the demand, accuracy scaling
// otherwise, and when not even that can serve it, the allocation of the largest demand it can serve.
func Solve(in Input, opt Options) (*Result, error) {
	start := time.Now()
	if err := in.check(); err != nil {
		return nil, err
	}
	if err := opt.check(); err != nil {
		return nil, err
	}
	res := &Result{Demand: in.Demand, Servers: in.Servers, ServedQPS: in.Demand, Optimal: true}
	nodes := 0
	finish := func(r *Result) (*Result, error) {
		r.SolveMs = float64(time.Since(start).Microseconds()) / 1000
		r.Nodes = nodes
		return r, nil
	}
	maxServable := func() (float64, error) {
		m, err := build(in, stepMaxDemand)
		if err != nil {
			return 0, err
		}
		sol, err := m.solve(opt)
		nodes += sol.Nodes
		if err != nil {
			return 0, err
		}
		if sol.Status == milp.Infeasible || sol.X == nil {
			return 0, nil
		}
		res.Optimal = res.Optimal && sol.Status == milp.Optimal
		res.Gap = max(res.Gap, sol.Gap)
		return sol.Objective, nil
	}

	// Step 1: hardware scaling.
	if m, err := build(in, stepHardware); err == nil {
		sol, err := m.solve(opt)
		nodes += sol.Nodes
		if err != nil {
			return nil, err
		}
		if sol.X != nil {
			m.read(sol, res)
			res.Mode = ModeHardware
			if opt.MaxServable {
				if res.MaxServableQPS, err = maxServable(); err != nil {
					return nil, err
				}
			}
			return finish(res)
		}
	}
	// Step 2: accuracy scaling.
	m, err := build(in, stepAccuracy)
	if err != nil {
		return nil, err
	}
	sol, err := m.solve(opt)
	nodes += sol.Nodes
	if err != nil {
		return nil, err
	}
	if sol.X != nil {
		m.read(sol, res)
		res.Mode = ModeAccuracy
		if opt.MaxServable {
			if res.MaxServableQPS, err = maxServable(); err != nil {
				return nil, err
			}
		}
		return finish(res)
	}
	// Overloaded: allocate for the most these servers can serve.
	dmax, err := maxServable()
	if err != nil {
		return nil, err
	}
	res.MaxServableQPS = dmax
	res.Mode = ModeOverloaded
	if dmax <= 0 {
		return finish(res)
	}
	at := in
	at.Demand = dmax * (1 - 1e-7) // just inside, so that tolerances do not make it infeasible
	at.headroomDemand = in.Demand
	m, err = build(at, stepAccuracy)
	if err != nil {
		return nil, err
	}
	sol, err = m.solve(opt)
	nodes += sol.Nodes
	if err != nil {
		return nil, err
	}
	if sol.X == nil {
		return nil, fmt.Errorf("allocate: no allocation for %.3f QPS, the largest demand found servable", at.Demand)
	}
	m.read(sol, res)
	res.ServedQPS = at.Demand
	return finish(res)
}

// check says what is wrong with in, if anything.
func (in Input) check() error {
	if in.Spec == nil {
		return errors.New("allocate: no pipeline spec")
	}
	if in.Servers <= 0 {
		return ErrNoServers
	}
	if in.Demand < 0 || math.IsNaN(in.Demand) || math.IsInf(in.Demand, 0) {
		return fmt.Errorf("allocate: demand %v QPS: want a finite number >= 0", in.Demand)
	}
	return nil
}

// WriteLP writes the accuracy-scaling MILP of in (Solve's step 2: every variant, the highest system accuracy that
// serves in.Demand) in LP format: to read, or to solve with another solver (cbc FILE solve). A model past
// MaxFlowColumns generates its flow columns as it solves and has no whole form to write: ErrModelTooLarge.
func WriteLP(w io.Writer, in Input) error {
	if err := in.check(); err != nil {
		return err
	}
	m, err := build(in, stepAccuracy)
	if err != nil {
		return err
	}
	if m.priced {
		return fmt.Errorf("%w: its flow columns are generated while solving, so it has no whole LP form to write",
			ErrModelTooLarge)
	}
	return milp.WriteLP(w, m.prob)
}

// solve runs branch-and-bound on the model, from a first point found by a heuristic.
func (m *model) solve(opt Options) (milp.Result, error) {
	if m.step == stepHardware {
		if res, ok := m.enumerateHardware(); ok {
			if res.X == nil || m.prob.Violation(res.X) <= 1e-6 {
				return res, nil
			}
			// Not expected: the enumeration's point breaks the model. The MILP decides.
		}
	}
	return milp.Solve(m.prob, m.milpOptions(opt))
}

// milpOptions are the branch-and-bound's options for the model: its first point (or the heuristic that finds one
// from the root's LP), pricer and tolerances.
func (m *model) milpOptions(opt Options) milp.Options {
	o := milp.Options{TimeLimit: opt.TimeLimit, Pricer: m.pricer(), Workers: opt.workers(), RelGap: opt.Gap}
	if m.step == stepHardware {
		o.IntegralObjective = true
		o.Incumbent = m.hardwareIncumbent()
	} else {
		o.RootHeuristic = func(x []float64) []float64 { return m.fixedBatchIncumbent(x, opt) }
	}
	return o
}

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
		c  *combo
		rc float64
	}
	return func(duals, x []float64) (int, bool) {
		var found []candidate
		for _, pa := range m.paths {
			if c, rc := m.bestCombo(pa, duals, sign); c != nil {
				if _, ok := m.comboCols[comboKey(pa, c.batches)]; !ok {
					found = append(found, candidate{c, rc})
				}
			}
		}
		// The most negative first, a few per round: adding every path's best at once grows the LP by thousands
		// of columns per node on a 4-task chain, most of them never used.
		sort.Slice(found, func(i, j int) bool { return found[i].rc < found[j].rc })
		added := 0
		for _, f := range found[:min(len(found), columnsPerRound)] {
			m.addCombo(f.c.path, f.c.batches)
			added++
		}
		if added > 0 {
			return added, false
		}
		for _, u := range m.unserved {
			if x[u] > 1e-9 {
				return 0, true
			}
		}
		return 0, false
	}
}

// columnsPerRound is how many columns a round of pricing adds at most.
const columnsPerRound = 50

// bestCombo is the combination of batch sizes of path pa with the most negative reduced cost under duals (below
// -1e-9) and that cost, or nil: a depth-first search over the hops' batch sizes that fit the budget, pruned by the
// least each remaining hop (and prefix agreement) can still subtract.
func (m *model) bestCombo(pa *path, duals []float64, sign float64) (*combo, float64) {
	n := len(pa.hops)
	fixedPart := sign*m.comboObj(pa) - duals[m.demandRow[pa.chain]]
	if m.minAccuracyRow >= 0 {
		fixedPart -= duals[m.minAccuracyRow] * m.weights[pa.chain] * pa.accuracy
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
				hopCost[i][bi] = -duals[kv.capRow[bi]] * pa.mult[i]
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
		for bi, l := range m.variants[pa.hops[i]].lat {
			if lat+l+pa.fastestAfter[i] > pa.maxLat+1e-9 {
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
	return &combo{path: pa, batches: best}, bestRC
}

// pathFlows is the traffic of each path under x (the sum over its combinations of batch sizes).
func (m *model) pathFlows(x []float64) map[*path]float64 {
	out := map[*path]float64{}
	for _, c := range m.combos {
		out[c.path] += x[c.col]
	}
	return out
}

// fixedBatchIncumbent is a first point for steps 2 and 3, found the way an experienced operator would: from the
// solution x of the LP relaxation (the search's root), give each variant it uses the batch size where it gives that
// variant the most capacity (or the largest below it at which the paths the LP sends traffic on still fit), and
// every other variant the largest batch size that still fits some path through it; then solve the much smaller
// MILP left (replica counts and flows only) with a node limit. nil when that restricted problem has no point within
// its limit; the search then starts without one.
func (m *model) fixedBatchIncumbent(x []float64, opt Options) []float64 {
	p := m.prob
	flows := m.pathFlows(x)
	fixed := make([]int, len(m.variants)) // batch index per variant, -1 while undecided
	// fits says path pa fits its budget with variant k at batch bi, the hops decided at theirs, the rest at their
	// fastest.
	fits := func(pa *path, k, bi int) bool {
		lat := 0.0
		for _, h := range pa.hops {
			switch {
			case h == k:
				lat += m.variants[k].lat[bi]
			case fixed[h] >= 0:
				lat += m.variants[h].lat[fixed[h]]
			default:
				lat += slicesMin(m.variants[h].lat)
			}
		}
		return lat <= pa.maxLat+1e-9
	}
	// The variants the LP gives capacity, the most replicas first.
	pick := make([]int, len(m.variants))
	weight := make([]float64, len(m.variants))
	var order []int
	for k, kv := range m.variants {
		fixed[k], pick[k] = -1, -1
		for bi, n := range kv.n {
			weight[k] += x[n]
			if x[n] > 1e-9 && (pick[k] < 0 || x[n] > x[kv.n[pick[k]]]) {
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
				if flows[pa] > 1e-9 && slices.Contains(pa.hops, k) && !fits(pa, k, bi) {
					ok = false
					break
				}
			}
			if ok || bi == 0 {
				fixed[k] = bi
			}
		}
	}
	// The others, most accurate first: the largest batch at which some path through the variant and variants the
	// LP uses fits (so that the restricted problem can move traffic onto it), else some path at all.
	lpUsed := make([]bool, len(m.variants))
	for _, k := range order {
		lpUsed[k] = true
	}
	order = order[:0]
	for k := range m.variants {
		if fixed[k] < 0 && len(m.variants[k].z) > 0 {
			order = append(order, k)
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		return m.variants[order[i]].v.Accuracy > m.variants[order[j]].v.Accuracy
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
					if slices.Contains(pa.hops, k) && (!strict || withUsed(pa, k)) && fits(pa, k, bi) {
						fixed[k] = bi
						break
					}
				}
			}
		}
	}
	if m.priced {
		// The one combination of batch sizes per path the fixed batches allow, if it fits and is not a column yet.
		for _, pa := range m.paths {
			batches := make([]int, len(pa.hops))
			lat, last := 0.0, len(pa.hops)-1
			for i, h := range pa.hops[:last] {
				if batches[i] = fixed[h]; batches[i] < 0 {
					lat = math.Inf(1)
					break
				}
				lat += m.variants[h].lat[batches[i]]
			}
			batches[last] = m.threshold(pa, lat)
			if fixed[pa.hops[last]] >= 0 && fixed[pa.hops[last]] <= batches[last] {
				if _, ok := m.comboCols[comboKey(pa, batches)]; !ok {
					m.addCombo(pa, batches)
				}
			}
		}
	}
	sub := *p
	sub.Lower = append([]float64(nil), p.Lower...)
	sub.Upper = append([]float64(nil), p.Upper...)
	for k, kv := range m.variants {
		for bi := range kv.z {
			if bi == fixed[k] {
				sub.Lower[kv.z[bi]], sub.Upper[kv.z[bi]] = 1, 1
				continue
			}
			sub.Upper[kv.z[bi]], sub.Upper[kv.n[bi]] = 0, 0
		}
	}
	for _, c := range m.combos {
		if !m.carries(c, func(h int) int { return fixed[h] }) {
			sub.Upper[c.col] = 0
		}
	}
	for _, u := range m.unserved {
		sub.Upper[u] = 0
	}
	// Pseudo-costs alone choose its branchings: with strong branching, most of its LPs, whole solves took 1.1-1.3x
	// as long (384 accuracy-scaling solves of the examples).
	o := milp.Options{MaxNodes: 2000, NoStrongBranching: true}
	if opt.TimeLimit > 0 {
		o.TimeLimit = opt.TimeLimit / 4
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
	// One variant per task (the first kept), all paths through them.
	pick := map[string]int{}
	for k, kv := range m.variants {
		if _, ok := pick[kv.task]; !ok && len(kv.z) > 0 {
			pick[kv.task] = k
		}
	}
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
			var found *combo
			for _, c := range m.combos {
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
				x[kv.z[bi]], x[kv.n[bi]] = 1, float64(n)
			}
		}
		m.setSpills(x)
		m.fillAggregates(x)
		if p.Violation(x) <= 1e-6 {
			return x
		}
	}
	return nil
}

// loads is the traffic (items/s) reaching each variant under the flows of x.
func (m *model) loads(x []float64) []float64 {
	out := make([]float64, len(m.variants))
	for _, c := range m.combos {
		for i, h := range c.path.hops {
			if c.path.chain == m.refChain[m.variants[h].task] {
				out[h] += c.path.mult[i] * x[c.col]
			}
		}
	}
	return out
}

// read fills res from a solution.
func (m *model) read(sol milp.Result, res *Result) {
	x := sol.X
	res.Optimal = res.Optimal && sol.Status == milp.Optimal
	res.Gap = max(res.Gap, sol.Gap)
	d := x[m.demand]
	loads := m.loads(x)
	res.Variants = nil
	res.ServersUsed = 0
	for k, kv := range m.variants {
		for bi := range kv.z {
			n := int(math.Round(x[kv.n[bi]]))
			if x[kv.z[bi]] < 0.5 || n == 0 {
				continue
			}
			res.Variants = append(res.Variants, Hosted{Task: kv.task, Variant: kv.v.Name, Replicas: n,
				BatchSize: kv.batches[bi], LatencyMs: kv.p50[bi], CapacityQPS: kv.absorbs(bi, float64(n), 1) / m.in.utilization(),
				LoadQPS: loads[k]})
			res.ServersUsed += n
		}
	}
	acc := 0.0
	if d > 0 {
		for pa, f := range m.pathFlows(x) {
			acc += m.weights[pa.chain] * pa.accuracy * f / d
		}
	} else {
		// No traffic: the accuracy of the most accurate variants, which a hardware plan hosts.
		for ci, chain := range m.chains {
			names := make([]string, len(chain))
			for i, t := range chain {
				names[i] = t + "/" + m.in.Spec.Task(t).MostAccurate().Name
			}
			acc += m.weights[ci] * m.in.Spec.PathAccuracyOf(names)
		}
	}
	res.SystemAccuracy = acc
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

// Plan turns an allocation into the plan workers follow (routing is computed separately).
func (r *Result) Plan(pipelineName string, epoch uint64) *plan.Plan {
	p := &plan.Plan{Pipeline: pipelineName, Epoch: epoch, Mode: r.Mode, Allocation: &plan.Allocation{
		DemandQPS: r.Demand, ServedQPS: r.ServedQPS, ClusterServers: r.Servers, ActiveServers: r.ServersUsed,
		SystemAccuracy: r.SystemAccuracy, Optimal: r.Optimal, Gap: r.Gap, SolveMs: r.SolveMs}}
	for _, h := range r.Variants {
		p.Variants = append(p.Variants, plan.VariantPlan{Task: h.Task, Variant: h.Variant, Replicas: h.Replicas,
			MaxBatch: h.BatchSize, BudgetMs: h.LatencyMs, CapacityQPS: h.CapacityQPS})
	}
	return p
}
