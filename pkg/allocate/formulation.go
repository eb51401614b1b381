// The MILP of one step: its columns (the demand served, per variant and batch size a batch choice and a replica
// count, aggregates to branch on, flows, spills) and its rows (demand, capacity, servers, shared prefixes).

package allocate

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// step is which of the MILPs a model is.
type step int

const (
	stepHardware  step = iota // most accurate variants only; minimise servers
	stepAccuracy              // every variant; maximise system accuracy
	stepMaxDemand             // every variant; maximise the demand served
	// stepFloor: every variant, the demand fixed, a system accuracy of at least Input.MinAccuracy; minimise
	// servers (their price on a priced cluster), the most accurate of those plans first (floor.go).
	stepFloor
)

// hasFloorRow says the step's model carries the minimum-accuracy row: every step over every variant, when a floor
// is asked for (the hardware step's most accurate variants are at or above any floor they can reach).
func (st step) hasFloorRow(in Input) bool { return in.MinAccuracy > 0 && st != stepHardware }

// keptVariant is a variant that presolve keeps, with the batch sizes it allows (those that fit some chain's latency
// budget and no other beats) and, once built, its columns and rows. Every slice but the columns' is indexed by
// allowed batch, "bi".
type keptVariant struct {
	task    string
	variant *pipeline.Variant
	batches []int // allowed maximum batch sizes, in order of latency (threshold relies on it)
	// latencyMs is the latency the plan budgets: the p50 times a burst's rounds (see burst.go).
	latencyMs []float64
	p50Ms     []float64 // p50 latency of one batch
	// rounds is the batches a typical burst takes, and minReplicas the replicas that needs (see burstOptions): a
	// batch size may be allowed several times, with fewer rounds on more replicas.
	rounds      []int
	minReplicas []float64
	// headroom is the load (items/s) the replicas keep free for queueing (see arrivals.headroom).
	headroom   []float64
	throughput []float64 // items/s of one replica, at the plan's utilization
	// batchChoiceCol (binary: the variant runs at this batch size) and replicasCol (its replicas there), per
	// allowed batch; replicasTotalCol is the replicas over every batch size, to branch on (-1 when the variant has
	// no columns: it is on no path).
	batchChoiceCol, replicasCol []int
	replicasTotalCol            int
	// capacityRow is the row per allowed batch where the load reaching the variant meets its replicas' throughput.
	capacityRow []int
	// spillDownCol[bi] (bi >= 1) moves load a leaf variant's flow columns bring to batch bi's capacity row down to
	// batch bi-1's (see threshold: a leaf task ends its chains, and the flow columns leave its batch size open).
	spillDownCol []int
	// joinCapacity is, per chain through a join that ends at the variant's task and is not the task's reference
	// chain, the capacity rows and spill columns that chain's flows meet on their own (addJoinCapacity).
	joinCapacity map[int]*capacityRows
}

// capacityRows are a leaf variant's capacity rows (per allowed batch) and spill columns for one chain's flows.
type capacityRows struct {
	row, spillDownCol []int
}

// label names allowed batch bi: its size, and the rounds of a burst when more than one ("8x2").
func (kv *keptVariant) label(bi int) string {
	if kv.rounds[bi] > 1 {
		return strconv.Itoa(kv.batches[bi]) + "x" + strconv.Itoa(kv.rounds[bi])
	}
	return strconv.Itoa(kv.batches[bi])
}

// replicasFor is the fewest replicas that carry load (items/s) at allowed batch bi: its capacity row's, and at
// least those its burst needs (0 without load).
func (kv *keptVariant) replicasFor(bi int, load float64) int {
	if load <= 0 {
		return 0
	}
	return max(int(kv.minReplicas[bi]), int(math.Ceil((load+kv.headroom[bi])/kv.throughput[bi]-1e-9)))
}

// absorbs is the load that the given replicas at allowed batch bi carry, chosen being the batch choice's value (1
// when the size is chosen, and then its headroom is kept free).
func (kv *keptVariant) absorbs(bi int, replicas, chosen float64) float64 {
	return kv.throughput[bi]*replicas - kv.headroom[bi]*chosen
}

// model is the MILP of one step, with what is needed to read its solution back.
type model struct {
	in       Input
	step     step
	prob     *milp.Problem
	variants []*keptVariant
	paths    []*path
	chains   [][]string
	// chainBudgetMs is per chain the execution time its variants may take (Input.chainBudget).
	chainBudgetMs []float64
	chainShare    []float64 // per chain: its share of the leaf traffic (chainWeights)
	// refChain is per task the chain whose flows its capacity rows count: a task on several chains (above a task
	// with several children) gets each request's traffic once, and the shared-prefix rows make the chains agree.
	refChain  map[string]int
	demandCol int           // the column of the demand served (fixed but in the max-demand step)
	flows     []*flowColumn // every flow column, in column order
	maxLoad   []float64     // per variant: the most traffic that can reach it
	// taskServersCol is the column of the servers of each task (see addAggregateColumns).
	taskServersCol map[string]int
	// Rows that flow columns enter (see flowTerms); minAccuracyRow is -1 when there is none.
	chainDemandRow []int
	agreements     []agreementRows
	minAccuracyRow int
	// viaJoin is per chain whether it runs through a join (addJoinAgreement).
	viaJoin []bool
	// firstFlowCol is the first flow column; flowColByKey the column of each flow column by flowKey.
	firstFlowCol int
	flowColByKey map[string]int
	// priced says flow columns are generated as the LPs need them (see pricer); unservedCols are then the columns
	// of the accuracy step's unserved demand, per chain.
	priced       bool
	unservedCols []int
	// tried is the batch sizes the fixed-batch heuristic has tried in this model's solve.
	tried *triedBatches
	// floorTieBreak is the floor step's weight of the system accuracy against servers (floor.go).
	floorTieBreak float64
}

// build writes the MILP of one step, stage by stage: presolve keeps the variants and batch sizes that can fit, the
// paths of variants along each chain follow, then the columns of the demand and of each variant, the rows, and last
// the flow columns, which enter rows that already exist. The order of columns and rows is the search's (its
// branchings and ties follow it), so a change of order changes which of equal optima a solve returns.
func build(in Input, st step) (*model, error) {
	m := newModel(in, st)
	m.keepVariants()
	if err := m.enumeratePaths(); err != nil {
		return nil, err
	}
	demandUB := m.addDemandColumn()
	m.maxLoad = m.loadBounds(demandUB)
	if st != stepHardware {
		m.spreadHeadroom()
	}
	m.addBatchColumns()
	m.addCostTieBreak()
	m.addRows()
	if err := m.addFlowColumns(); err != nil {
		return nil, err
	}
	m.addSpillColumns()
	return m, nil
}

// newModel is the model of step st with its chains, their budgets and shares, and each task's reference chain.
func newModel(in Input, st step) *model {
	m := &model{in: in, step: st, prob: &milp.Problem{}, chains: in.Spec.Chains(), refChain: map[string]int{}}
	for ci, chain := range m.chains {
		m.chainBudgetMs = append(m.chainBudgetMs, in.chainBudget(chain))
		for _, t := range chain {
			if _, ok := m.refChain[t]; !ok {
				m.refChain[t] = ci
			}
		}
	}
	m.chainShare = chainWeights(in, m.chains)
	if st == stepFloor {
		m.floorTieBreak = floorTieBreakOf(in)
	}
	m.viaJoin = make([]bool, len(m.chains))
	for _, t := range in.Spec.Tasks {
		if t.Join != nil {
			through, _ := m.chainsThrough(t.Name)
			for _, ci := range through {
				m.viaJoin[ci] = true
			}
		}
	}
	return m
}

// keepVariants is presolve: per variant the step may host, the batch sizes (and burst options) whose budgeted
// latency leaves some chain through the task within its budget with every other task at its fastest, less those
// another beats (dropDominatedBatches). A variant with none is left out.
func (m *model) keepVariants() {
	in, spec := m.in, m.in.Spec
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
	slowest := in.slowestHops(m.step)
	for ti := range spec.Tasks {
		t := &spec.Tasks[ti]
		top := t.MostAccurate().Accuracy
		for vi := range t.Variants {
			v := &t.Variants[vi]
			if m.step == stepHardware && v.Accuracy < top {
				continue // constraint 10: only the most accurate variants in hardware scaling
			}
			servers := in.classServers(v.Name)
			if servers == 0 {
				continue // its class has no servers to host it
			}
			kv := &keptVariant{task: t.Name, variant: v}
			arr := in.arrivalsOf(t.Name, m.step)
			for _, b := range spec.BatchSizes {
				p, ok := v.Point(b)
				if !ok {
					continue
				}
				for _, o := range burstOptions(arr.burst(), b, servers) {
					lat := p.P50Ms * float64(o.rounds)
					if !fitsSomeChain(m, t.Name, lat, fastest) {
						continue
					}
					kv.batches = append(kv.batches, b)
					kv.rounds = append(kv.rounds, o.rounds)
					kv.minReplicas = append(kv.minReplicas, float64(o.replicas))
					kv.headroom = append(kv.headroom, in.headroom(arr, p.P50Ms, m.waitAllowance(t.Name, lat, slowest)))
					kv.latencyMs = append(kv.latencyMs, lat)
					kv.p50Ms = append(kv.p50Ms, p.P50Ms)
					kv.throughput = append(kv.throughput, in.utilization()*float64(b)/(p.P50Ms/1000))
				}
			}
			dropDominatedBatches(kv)
			if len(kv.batches) == 0 {
				continue
			}
			m.variants = append(m.variants, kv)
		}
	}
}

// addDemandColumn adds the column of the demand served and sets the objective's sense. It returns the most
// demand the column allows: the demand asked for, or in the max-demand step a bound on what the cluster serves.
func (m *model) addDemandColumn() (demandUB float64) {
	p, in := m.prob, m.in
	demandUB = in.Demand
	if m.step == stepMaxDemand {
		p.Sense = milp.Maximize
		demandUB = m.demandBound()
		m.demandCol = p.AddCol("demand", 1, 0, demandUB, false, 0)
	} else {
		m.demandCol = p.AddCol("demand", 0, in.Demand, in.Demand, false, 0)
	}
	if m.step == stepAccuracy {
		p.Sense = milp.Maximize
	}
	return demandUB
}

// addBatchColumns adds, per variant on some path and allowed batch, the batch choice and the replica count (the
// hardware step's objective: servers).
func (m *model) addBatchColumns() {
	p := m.prob
	onPath := make([]bool, len(m.variants)) // a variant on no path cannot be used
	for _, pa := range m.paths {
		for _, h := range pa.hops {
			onPath[h] = true
		}
	}
	for k, kv := range m.variants {
		if !onPath[k] {
			continue
		}
		for bi := range kv.batches {
			name := kv.task + "/" + kv.variant.Name + "@" + kv.label(bi)
			// Batch choices and replica counts are branched on alike, after the servers of each task
			// (addAggregateColumns): on the examples that closes the gap in fewer nodes than taking every batch
			// choice first.
			kv.batchChoiceCol = append(kv.batchChoiceCol, p.AddCol("use "+name, 0, 0, 1, true, priorityVariant))
			kv.replicasCol = append(kv.replicasCol,
				p.AddCol("replicas "+name, 0, 0, m.replicaBound(k, bi), true, priorityVariant))
			if m.step == stepHardware || m.step == stepFloor {
				p.Obj[kv.replicasCol[bi]] = m.serverWeight(kv)
			}
		}
	}
}

// addRows adds the rows, with no flow columns yet (addFlowColumn puts each in the rows it belongs to): per chain
// its demand, the agreements of chains that share tasks, per variant and batch its capacity and the replicas the choice allows, one batch
// size per variant, the servers, the aggregates, a replica per task reached and the minimum accuracy.
func (m *model) addRows() {
	p, in := m.prob, m.in
	for ci := range m.chains {
		m.chainDemandRow = append(m.chainDemandRow, p.AddRow("demand of chain "+strings.Join(m.chains[ci], "->"), 0,
			0, milp.Term{Col: m.demandCol, Coef: -1}))
	}
	m.addAgreementRows()
	for _, kv := range m.variants {
		if len(kv.batchChoiceCol) == 0 {
			continue
		}
		var oneBatch []milp.Term
		for bi := range kv.batches {
			use, replicas := kv.batchChoiceCol[bi], kv.replicasCol[bi]
			// Constraint 2 at the chosen batch size: the traffic reaching the variant (through its task's reference
			// chain) at this batch size fits its replicas there, less the headroom when the size is chosen.
			kv.capacityRow = append(kv.capacityRow, p.AddRow("capacity of "+kv.task+"/"+kv.variant.Name+"@"+
				kv.label(bi), math.Inf(-1), 0, milp.Term{Col: replicas, Coef: -kv.throughput[bi]},
				milp.Term{Col: use, Coef: kv.headroom[bi]}))
			addChosenBatchRows(p, kv, bi)
			oneBatch = append(oneBatch, milp.Term{Col: use, Coef: 1})
		}
		p.AddRow("one batch size of "+kv.task+"/"+kv.variant.Name, math.Inf(-1), 1, oneBatch...)
		m.addJoinCapacity(kv)
	}
	m.addServersRows(p, func(kv *keptVariant) []int { return kv.replicasCol })
	m.addAggregateColumns()
	m.addReplicaPerTask(p)
	m.minAccuracyRow = -1
	if m.step.hasFloorRow(in) {
		m.minAccuracyRow = p.AddRow("minimum accuracy", 0, math.Inf(1),
			milp.Term{Col: m.demandCol, Coef: -in.MinAccuracy})
	}
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
		if on && total <= m.chainBudgetMs[ci]+1e-9 {
			return true
		}
	}
	return false
}

// dropDominatedBatches removes batch sizes another batch size beats on both latency and throughput: a solution
// using one could use the other and stay feasible. The batch sizes kept are put in order of latency (threshold
// relies on it). A burst's rounds (see burst.go) can make a larger batch faster than a smaller one; it then has the
// higher throughput too, and the smaller one goes.
func dropDominatedBatches(kv *keptVariant) {
	var keep []int
	for i := range kv.batches {
		dominated := false
		for j := range kv.batches {
			if j == i {
				continue
			}
			better := kv.latencyMs[j] <= kv.latencyMs[i] && kv.throughput[j] >= kv.throughput[i] &&
				kv.minReplicas[j] <= kv.minReplicas[i] && kv.headroom[j] <= kv.headroom[i]
			strictly := kv.latencyMs[j] < kv.latencyMs[i] || kv.throughput[j] > kv.throughput[i] ||
				kv.minReplicas[j] < kv.minReplicas[i] || kv.headroom[j] < kv.headroom[i] || j < i
			if better && strictly {
				dominated = true
				break
			}
		}
		if !dominated {
			keep = append(keep, i)
		}
	}
	sort.SliceStable(keep, func(a, b int) bool { return kv.latencyMs[keep[a]] < kv.latencyMs[keep[b]] })
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
	kv.latencyMs, kv.p50Ms, kv.throughput = pick(kv.latencyMs), pick(kv.p50Ms), pick(kv.throughput)
	kv.minReplicas, kv.headroom = pick(kv.minReplicas), pick(kv.headroom)
	kv.batches, kv.rounds = batches, rounds
}

// loadBounds is, per variant, the most traffic that can reach it when the root demand is d.
func (m *model) loadBounds(d float64) []float64 {
	ub := make([]float64, len(m.variants))
	for _, pa := range m.paths {
		for i, h := range pa.hops {
			ub[h] = max(ub[h], d*pa.itemsPerRequest[i])
		}
	}
	return ub
}

// reached says every path of the task's reference chain brings it traffic (no variant above it emits nothing).
func (m *model) reached(task string) bool {
	for _, pa := range m.paths {
		if pa.chain != m.refChain[task] {
			continue
		}
		for i, h := range pa.hops {
			if m.variants[h].task == task && pa.itemsPerRequest[i] <= 0 {
				return false
			}
		}
	}
	return true
}

// Branching priorities: the servers of a task first; then, alike, the replicas of a variant, batch choices and
// replicas per batch size.
const (
	priorityVariant = 2
	priorityTask    = 4
)

// addAggregateColumns adds integer columns for the servers of each task, branched on first, and the replicas of each
// variant (over its batch sizes). Branching on a per-batch replica count alone barely moves the LP bound, which
// shifts the fraction to another batch size or variant of the same task; "task t has at most 9 servers, or at least
// 10" cannot be dodged that way. With pseudo-cost branching, taking the aggregates first cut the nodes to prove an
// accuracy-scaling optimum on the traffic example at 400-900 QPS from 739 to more than 12,000 down to 43-1,292.
// With reliability branching (pkg/milp), which measures what each candidate's branches would gain, the variants'
// replicas do better competing with the per-batch columns than preceding them: on the traffic example at eight
// demands of 400-900 QPS, 19-291 nodes where the variants first took 26-871 (measured while choosing the
// strong-branching limits).
func (m *model) addAggregateColumns() {
	p := m.prob
	m.taskServersCol = map[string]int{}
	for _, kv := range m.variants {
		kv.replicasTotalCol = -1
	}
	for _, t := range m.in.Spec.Tasks {
		var taskReplicas []milp.Term
		for _, kv := range m.variants {
			if kv.task != t.Name || len(kv.replicasCol) == 0 {
				continue
			}
			var replicas []milp.Term
			for _, col := range kv.replicasCol {
				replicas = append(replicas, milp.Term{Col: col, Coef: 1})
			}
			taskReplicas = append(taskReplicas, replicas...)
			name := t.Name + "/" + kv.variant.Name
			kv.replicasTotalCol = p.AddCol("replicas of "+name, 0, 0, float64(m.in.classServers(kv.variant.Name)), true,
				priorityVariant)
			p.AddRow("replicas of "+name, 0, 0, append(replicas, milp.Term{Col: kv.replicasTotalCol, Coef: -1})...)
		}
		m.addClassAggregates(t.Name)
		if len(taskReplicas) > 0 {
			c := p.AddCol("servers of "+t.Name, 0, 0, float64(m.in.servers()), true, priorityTask)
			p.AddRow("servers of "+t.Name, 0, 0, append(taskReplicas, milp.Term{Col: c, Coef: -1})...)
			m.taskServersCol[t.Name] = c
		}
	}
}

// addChosenBatchRows adds to p the rows that tie variant kv's replicas at allowed batch bi to its choice: replicas
// only at the chosen batch size, and at least as many as its burst's rounds need. The model and the paper's form
// (complete) share them.
func addChosenBatchRows(p *milp.Problem, kv *keptVariant, bi int) {
	use, replicas := kv.batchChoiceCol[bi], kv.replicasCol[bi]
	p.AddRow("replicas at the chosen batch", math.Inf(-1), 0,
		milp.Term{Col: replicas, Coef: 1}, milp.Term{Col: use, Coef: -p.Upper[replicas]})
	addBurstReplicas(p, kv, bi)
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
				for _, col := range kv.replicasCol {
					terms = append(terms, milp.Term{Col: col, Coef: 1})
				}
			}
		}
		if len(terms) > 0 {
			p.AddRow("a replica of "+t.Name, 1, math.Inf(1), terms...)
		}
	}
}
