package allocate

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// complete is the allocation MILP as the paper writes it, for an independent check by CBC: one flow column per path
// (where the model has one per combination of batch sizes that fits), capacity per variant over its batch sizes, and
// constraint 7 with a binary I(p) per path: a path that carries traffic has every variant on it hosted and its
// latency at the chosen batch sizes within its budget (a big-M row). Its first columns are the model's demand,
// batch-choice and replica columns, at the same indexes; point maps a point of the model onto it.
func (m *model) complete() (p *milp.Problem, point func(x []float64) []float64) {
	src := m.prob
	base := m.firstFlowCol // the columns before the flow columns are the complete model's too
	p = &milp.Problem{Sense: src.Sense}
	for j := 0; j < base; j++ {
		p.AddCol(src.Names[j], src.Obj[j], src.Lower[j], src.Upper[j], src.Integer[j], src.Priority[j])
	}
	flow := make(map[*path]int, len(m.paths))
	used := make(map[*path]int, len(m.paths))
	for _, pa := range m.paths {
		flow[pa] = p.AddCol("flow "+m.pathName(pa), m.flowObjective(pa), 0, milp.Inf, false, 0)
		used[pa] = p.AddCol("carries "+m.pathName(pa), 0, 0, 1, true, 0)
	}

	m.addChainDemandRows(p, flow)
	m.addSharedPrefixRows(p, flow)
	m.addCompleteCapacityRows(p, flow)
	m.addReplicaPerTask(p)
	m.addPathRows(p, flow, used)
	if m.step.hasFloorRow(m.in) {
		terms := []milp.Term{{Col: m.demandCol, Coef: -m.in.MinAccuracy}}
		for _, pa := range m.paths {
			terms = append(terms, milp.Term{Col: flow[pa], Coef: m.chainShare[pa.chain] * pa.accuracy})
		}
		p.AddRow("minimum accuracy", 0, math.Inf(1), terms...)
	}
	point = func(x []float64) []float64 {
		out := make([]float64, p.NumCols())
		copy(out, x[:base])
		for pa, f := range m.pathFlows(x) {
			out[flow[pa]] = f
			if f > 1e-9 {
				out[used[pa]] = 1
			}
		}
		return out
	}
	return p, point
}

// addChainDemandRows makes the flows of each chain's paths carry the demand.
func (m *model) addChainDemandRows(p *milp.Problem, flow map[*path]int) {
	for ci := range m.chains {
		terms := []milp.Term{{Col: m.demandCol, Coef: -1}}
		for _, pa := range m.paths {
			if pa.chain == ci {
				terms = append(terms, milp.Term{Col: flow[pa], Coef: 1})
			}
		}
		p.AddRow("demand of chain "+strings.Join(m.chains[ci], "->"), 0, 0, terms...)
	}
}

// addSharedPrefixRows sends the same traffic through each assignment of variants to the tasks chains share (the
// model's agreements: the path before a task with several children, the root and a join with the tasks below it),
// whichever chain the traffic goes on.
func (m *model) addSharedPrefixRows(p *milp.Problem, flow map[*path]int) {
	for _, pr := range m.agreements {
		through := append([]int{pr.ref}, pr.others...)
		type key struct {
			shared string
			chain  int
		}
		groups := map[key][]milp.Term{}
		var shared []string
		seen := map[string]bool{}
		for _, pa := range m.paths {
			if !slices.Contains(through, pa.chain) {
				continue
			}
			hops := make([]int, len(pr.positions))
			for n, i := range pr.positions {
				hops[n] = pa.hops[i]
			}
			k := key{fmt.Sprint(hops), pa.chain}
			groups[k] = append(groups[k], milp.Term{Col: flow[pa], Coef: 1})
			if !seen[k.shared] {
				seen[k.shared] = true
				shared = append(shared, k.shared)
			}
		}
		for _, sh := range shared {
			for _, ci := range pr.others {
				terms := append([]milp.Term(nil), groups[key{sh, pr.ref}]...)
				for _, tm := range groups[key{sh, ci}] {
					terms = append(terms, milp.Term{Col: tm.Col, Coef: -1})
				}
				p.AddRow(pr.name+sh, 0, 0, terms...)
			}
		}
	}
}

// addCompleteCapacityRows bounds each variant's load by its capacity over its batch sizes, chosen one at a time,
// and the replicas by the servers.
func (m *model) addCompleteCapacityRows(p *milp.Problem, flow map[*path]int) {
	for k, kv := range m.variants {
		if len(kv.batchChoiceCol) == 0 {
			continue
		}
		var capTerms, oneBatch []milp.Term
		for _, pa := range m.paths {
			for i, h := range pa.hops {
				if h == k && pa.chain == m.refChain[kv.task] {
					capTerms = append(capTerms, milp.Term{Col: flow[pa], Coef: pa.itemsPerRequest[i]})
				}
			}
		}
		for bi := range kv.batches {
			use, replicas := kv.batchChoiceCol[bi], kv.replicasCol[bi]
			capTerms = append(capTerms, milp.Term{Col: replicas, Coef: -kv.throughput[bi]},
				milp.Term{Col: use, Coef: kv.headroom[bi]})
			addChosenBatchRows(p, kv, bi)
			oneBatch = append(oneBatch, milp.Term{Col: use, Coef: 1})
		}
		p.AddRow("capacity of "+kv.task+"/"+kv.variant.Name, math.Inf(-1), 0, capTerms...)
		p.AddRow("one batch size of "+kv.task+"/"+kv.variant.Name, math.Inf(-1), 1, oneBatch...)
	}
	m.addServersRows(p, func(kv *keptVariant) []int { return kv.replicasCol })
}

// addPathRows is constraint 7: a path that carries traffic (I(p) = 1) has every variant on it hosted and its latency
// at the chosen batch sizes within its budget (a big-M row).
func (m *model) addPathRows(p *milp.Problem, flow, used map[*path]int) {
	flowUB := p.Upper[m.demandCol]
	for _, pa := range m.paths {
		p.AddRow("I(p) of "+m.pathName(pa), math.Inf(-1), 0, milp.Term{Col: flow[pa], Coef: 1},
			milp.Term{Col: used[pa], Coef: -flowUB})
		worst := 0.0
		var lat []milp.Term
		for _, h := range pa.hops {
			kv := m.variants[h]
			hosted := []milp.Term{{Col: used[pa], Coef: 1}}
			for bi, z := range kv.batchChoiceCol {
				lat = append(lat, milp.Term{Col: z, Coef: kv.latencyMs[bi]})
				hosted = append(hosted, milp.Term{Col: z, Coef: -1})
			}
			worst += slicesMax(kv.latencyMs)
			p.AddRow("hosted on "+m.pathName(pa), math.Inf(-1), 0, hosted...)
		}
		if bigM := worst - pa.budgetMs; bigM > 0 {
			lat = append(lat, milp.Term{Col: used[pa], Coef: bigM})
			p.AddRow("latency of "+m.pathName(pa), math.Inf(-1), pa.budgetMs+bigM, lat...)
		}
	}
}
