package allocate

import (
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/variate"
)

// Items reach a task below the root in bursts: one item of its parent sends it k sub-requests at once, k drawn
// from the parent's fan-out distribution. Loki's model (a batch latency per task within half the SLO, the other
// half for queueing, and replicas fed at a share of their full-batch throughput) holds for items that arrive one at
// a time, and two things break it when k is large:
//   - rounds: a burst of k items at max batch b goes in ceil(k/b) messages (pkg/hop.Parts), which r free replicas
//     run ceil(ceil(k/b)/r) batches deep. A variant's latency at batch b is budgeted as its p50 times the rounds a
//     large burst takes (BurstQuantile of the distribution: a request is one frame, so its own burst decides it),
//     and each batch size comes with options of fewer rounds on more replicas (burstOptions; the replicas a
//     variant hosts at that option are at least those).
//   - queueing: Loki leaves each task at least one batch latency of waiting (waitAllowance), and feeds replicas up to
//     a share of their throughput (Input.Utilization). With few replicas (a plan for a low demand) Poisson
//     arrivals, and bursts far more, wait longer than that at any share: a variant keeps a fixed headroom free,
//     whatever its replicas (headroom), so that one replica runs well below the share and many close to it. It is
//     linear in the load and the replicas: the MILP's capacity row of a batch size gets it as a constant when the
//     size is chosen (where it is under one replica's load, the accuracy steps spread it over the throughput:
//     spreadHeadroom).
// A batch also takes whole messages, so messages of 6 items fill batches of 8 by three quarters under saturation;
// modelling that (measured with a Markov chain of the batches' first messages) cost the traffic example half a
// point of accuracy and changed nothing on the camera once the headroom was there, so the throughput stays b/p50.
// Where items arrive one at a time (every root task) the rounds are one; the MILP is the same, with other
// latencies, lower bounds on replicas and a constant in each capacity row, and solved as exactly.

// BurstQuantile is the quantile of a task's burst (the items one parent item sends it) that its latency is
// budgeted for: a request is one frame, and a frame with a large burst misses its deadline if the plan counted only
// a typical one.
const BurstQuantile = 0.95

// QueueEpsilon is the chance of waiting longer than its budget that headroom allows an item at a task.
const QueueEpsilon = 0.1

// arrivals is how items reach a task: pmf[k] is the chance that one item of the parent task sends it k.
type arrivals struct {
	pmf  []float64
	mean float64
}

// oneAtATime is the arrivals of the root task: its items come one at a time.
var oneAtATime = arrivals{pmf: []float64{0, 1}, mean: 1}

// arrivalsOf is how items reach task in step st: the fan-out distribution, for this task, of the variant of its
// parent task with the largest mean that the step may host (one at a time at the root).
// The paper's model (LatencyLoki) takes every task's items one at a time.
func (in Input) arrivalsOf(task string, st step) arrivals {
	parent := in.Spec.Task(in.Spec.Parent(task))
	if parent == nil || in.LatencyModel == LatencyLoki {
		return oneAtATime
	}
	top := parent.MostAccurate().Accuracy
	var best *pipeline.Variant
	mean := -1.0
	for vi := range parent.Variants {
		v := &parent.Variants[vi]
		if st == stepHardware && v.Accuracy < top {
			continue
		}
		if f := in.fanout(parent.Name, v, task); f > mean {
			best, mean = v, f
		}
	}
	if best == nil || parent.BranchOf(best, task) == nil || mean <= 0 {
		return arrivals{pmf: []float64{1}}
	}
	f := parent.BranchOf(best, task) // a parallel child's own branch, else the fan-out it has a share of
	var pmf func(k int) float64
	switch {
	case f.Distribution == pipeline.FanoutNegativeBinomial:
		pmf = func(k int) float64 { return variate.NegativeBinomialPMF(mean, f.Dispersion, k) }
	case f.Distribution == pipeline.FanoutFixed && len(f.Shares) <= 1:
		n := int(math.Round(mean))
		pmf = func(k int) float64 { return indicator(k == n) }
	default: // Poisson, and a fixed count split over several children (a binomial: a Poisson bounds its spread)
		pmf = func(k int) float64 { return variate.PoissonPMF(mean, k) }
	}
	a := arrivals{mean: mean}
	sum := 0.0
	for k := 0; sum < 1-1e-9 && k < 100000; k++ {
		p := pmf(k)
		a.pmf = append(a.pmf, p)
		sum += p
	}
	return a
}

// quantile is the least k whose cumulative probability reaches p.
func (a arrivals) quantile(p float64) int {
	sum := 0.0
	for k, q := range a.pmf {
		if sum += q; sum >= p {
			return k
		}
	}
	return len(a.pmf) - 1
}

// burst is the burst a task's latency is budgeted for: the BurstQuantile quantile of the items one parent item sends.
func (a arrivals) burst() int {
	return max(1, a.quantile(BurstQuantile))
}

// burstOption is one way a variant may take its budgeted burst at one batch size: in rounds batches, on at least
// replicas replicas.
type burstOption struct{ rounds, replicas int }

// burstOptions are the ways a burst of k items may run at max batch b on a cluster of servers: in ceil(k/b)
// messages, r replicas take ceil(ceil(k/b)/r) rounds. One option per number of rounds that needs fewer replicas
// than one round less (more rounds on as many replicas would only be slower).
func burstOptions(k, b, servers int) []burstOption {
	msgs := (k + b - 1) / b
	var out []burstOption
	for rounds := 1; rounds <= msgs; rounds++ {
		r := (msgs + rounds - 1) / rounds
		if r > servers || len(out) > 0 && out[len(out)-1].replicas == r {
			continue
		}
		out = append(out, burstOption{rounds: rounds, replicas: r})
	}
	return out
}

// headroom is the load (items/s) a variant at batch latency ms (one batch) keeps free of its replicas' capacity for
// queueing, when an item may wait wait ms at its task: with n*b batch slots of ms each, items arriving with index
// of dispersion kappa, the chance that an item waits longer than wait is about exp(-2 (free slots) wait / (ms
// kappa)) in heavy traffic (Kingman's approximation for many servers); at most QueueEpsilon takes
// ln(1/QueueEpsilon) kappa ms / (2 wait) free slots, each ms: that many items per ms.
//
// kappa is the index of dispersion (variance over mean of the counts in a long window) of the items reaching the
// task: parent items arriving with index d (the requests', requests: 1 for Poisson arrivals, the squared
// coefficient of variation of the gaps for a renewal process) and sending k items each give m2/m1 + (d-1) m1, m1
// and m2 the mean of k and of k^2 (1 at the root, where k is 1; m2/m1 for Poisson requests). Deeper tasks take the
// requests' d for their parents' items: a bound from below, since their parents' items are bursty themselves.
func (a arrivals) headroom(ms, wait, requests float64) float64 {
	var m1, m2 float64
	for k, q := range a.pmf {
		m1 += q * float64(k)
		m2 += q * float64(k*k)
	}
	if m1 <= 0 || wait <= 0 {
		return 0
	}
	kappa := max(m2/m1+(requests-1)*m1, 1e-3)
	slots := math.Log(1/QueueEpsilon) * kappa * ms / (2 * wait)
	return slots / (ms / 1000)
}

// headroom is the queueing headroom (items/s) a variant keeps free at batch latency ms when an item may wait wait
// ms, for items that arrive as arr says; the paper's model keeps none (its half of the SLO left for queueing and
// Input.Utilization are all it has).
func (in Input) headroom(arr arrivals, ms, wait float64) float64 {
	if in.LatencyModel == LatencyLoki {
		return 0
	}
	return arr.headroom(ms, wait, in.dispersion())
}

// dispersion is the requests' index of dispersion (Input.ArrivalDispersion; 1, Poisson's, when unset).
func (in Input) dispersion() float64 {
	if in.ArrivalDispersion > 0 {
		return in.ArrivalDispersion
	}
	return 1
}

// slowestHops is, per task, the most latency any of its variants may be budgeted (its largest batch's p50 times the
// most rounds of its burst): with the others', the slowest a path through the task can be.
func (in Input) slowestHops(st step) map[string]float64 {
	out := map[string]float64{}
	for ti := range in.Spec.Tasks {
		t := &in.Spec.Tasks[ti]
		k := in.arrivalsOf(t.Name, st).burst()
		for vi := range t.Variants {
			for _, p := range t.Variants[vi].Profile {
				out[t.Name] = max(out[t.Name], p.P50Ms*float64((k+p.Batch-1)/p.Batch))
			}
		}
	}
	return out
}

// waitAllowance is the least time an item may wait at task when the task's budgeted latency is lat: the workers
// stretch the plan's latencies to fill the SLO (plan.BudgetScale), so a task's share of the SLO's time beyond
// processing is lat over the path's latency; the path is at its slowest (each other task at slowestHops, and no
// more than the chain's budget, where the share is lat itself), through the chain where that is least.
func (m *model) waitAllowance(task string, lat float64, slowest map[string]float64) float64 {
	least := math.Inf(1)
	for ci, chain := range m.chains {
		path, on := lat, false
		for _, t := range chain {
			if t == task {
				on = true
			} else {
				path += slowest[t]
			}
		}
		if !on {
			continue
		}
		path = min(path, m.chainBudgetMs[ci])
		total := 2 * (m.chainBudgetMs[ci] + m.in.Spec.CommLatencyMs*float64(len(chain))) // the SLO
		least = min(least, lat/path*(total-m.in.Spec.CommLatencyMs*float64(len(chain))-path))
	}
	return max(least, lat)
}

func indicator(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// addBurstReplicas adds, when option bi of kv needs more than one replica, the row that a variant choosing it
// hosts that many.
func addBurstReplicas(p *milp.Problem, kv *keptVariant, bi int) {
	if kv.minReplicas[bi] > 1 {
		p.AddRow("replicas a burst needs at "+kv.task+"/"+kv.variant.Name+"@"+kv.label(bi), 0, math.Inf(1),
			milp.Term{Col: kv.replicasCol[bi], Coef: 1},
			milp.Term{Col: kv.batchChoiceCol[bi], Coef: -kv.minReplicas[bi]})
	}
}

// spreadHeadroom turns each batch size's headroom into a share of its throughput, as at the most load that can
// reach the variant at the demand asked for (Input.Demand, also in the max-demand step and the allocation of what
// it finds servable, which must agree): there the same replicas carry the load either way, and below it the share
// keeps less free. The MILP's capacity rows then need no batch-choice term, whose fractions in the LP relaxation
// let the headroom vanish and made the accuracy steps several times slower. Hardware scaling, whose loads are the
// demand's, keeps the headroom exact. In the accuracy step, the burst options a spread headroom leaves beaten go
// (dropDominatedBatches): on the traffic camera a third of the classifiers' columns, and 3.5x fewer nodes over its
// sweep. Not in the max-demand step, rarely solved: there the smaller model's complete form (export.go) made CBC
// miss the optimum of one cross-check instance (TestCrossCheckWithCBC's 10th) that our search and CBC on our form
// agree on.
func (m *model) spreadHeadroom() {
	ref := m.in.Demand
	if m.in.headroomDemand > 0 {
		ref = m.in.headroomDemand
	}
	loads := m.loadBounds(ref)
	for k, kv := range m.variants {
		for bi := range kv.headroom {
			if kv.headroom[bi] >= kv.throughput[bi] {
				continue // a replica's load or more: exact
			}
			if ub := loads[k]; kv.headroom[bi] > 0 && ub > 0 {
				kv.throughput[bi] *= ub / (ub + kv.headroom[bi])
			}
			kv.headroom[bi] = 0
		}
		if m.step == stepAccuracy || m.step == stepFloor {
			dropDominatedBatches(kv)
		}
	}
}
