// Server classes (Input.Cluster): the servers of each class, their prices, and what a model's rows and objective
// make of them.

package allocate

import (
	"errors"
	"fmt"
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// costTieBreak is how much system accuracy the accuracy step may give up, at most, for a cheaper plan when the
// cluster is priced: its objective is the system accuracy less costTieBreak times the plan's cost over the whole
// cluster's. Plans within it of the best accuracy count as equally accurate and the cheaper wins; above the solver's
// relative gap (1e-6 of an accuracy of 0.2-0.9), so that the search tells them apart.
const costTieBreak = 1e-5

// cluster is the servers the allocation may use: Cluster, or Servers servers of the default class.
func (in Input) cluster() plan.Cluster {
	if len(in.Cluster) > 0 {
		return in.Cluster
	}
	return plan.Uniform(in.Servers)
}

// servers is the number of servers over every class.
func (in Input) servers() int { return in.cluster().Total() }

// classServers is the number of servers of a variant's class (0: the variant cannot be hosted).
func (in Input) classServers(variant string) int { return in.cluster().Servers(wire.ClassOf(variant)) }

// checkCluster says what is wrong with the input's servers and cost cap, if anything.
func (in Input) checkCluster() error {
	seen := map[string]bool{}
	for _, sc := range in.Cluster {
		if !wire.ValidName(sc.Name) || seen[sc.Name] {
			return fmt.Errorf("allocate: server class %q: want distinct names of [A-Za-z0-9_-]", sc.Name)
		}
		seen[sc.Name] = true
		if sc.Servers < 0 || sc.PricePerHour < 0 || math.IsNaN(sc.PricePerHour) || math.IsInf(sc.PricePerHour, 0) {
			return fmt.Errorf("allocate: server class %s: %d servers at %v an hour: want a count and a price >= 0",
				sc.Name, sc.Servers, sc.PricePerHour)
		}
	}
	if in.servers() <= 0 {
		return ErrNoServers
	}
	if in.MaxCostPerHour < 0 || math.IsNaN(in.MaxCostPerHour) || math.IsInf(in.MaxCostPerHour, 0) {
		return fmt.Errorf("allocate: cost cap %v an hour: want a finite number >= 0", in.MaxCostPerHour)
	}
	if in.MaxCostPerHour > 0 && !in.cluster().Priced() {
		return errors.New("allocate: a cost cap needs the classes' prices")
	}
	return nil
}

// serversRowName is the name of a model's row that bounds the servers of class (the rows the joint MILP makes one
// per class): "servers" for the default class, as before classes, "servers@CLASS" for the others.
func serversRowName(class string) string {
	if class == wire.DefaultClass {
		return "servers"
	}
	return "servers@" + class
}

// classOfServersRow is the class whose servers a row bounds, if it is such a row.
func classOfServersRow(name string) (string, bool) {
	if name == "servers" {
		return wire.DefaultClass, true
	}
	if len(name) > len("servers@") && name[:len("servers@")] == "servers@" {
		return name[len("servers@"):], true
	}
	return "", false
}

// serverWeight is what one replica of kv weighs in the hardware step's objective: its class's price when the cluster
// is priced, else 1 (a server). Prices are scaled by priceScale, so that prices with few decimals give an integral
// objective, which lets the search prune a node whose bound rounds up to the incumbent.
func (m *model) serverWeight(kv *keptVariant) float64 {
	c := m.in.cluster()
	if c.Priced() {
		w := c.Price(kv.variant.Class()) * priceScale(c)
		if r := math.Round(w); math.Abs(w-r) <= 1e-9*max(1, w) {
			return r
		}
		return w
	}
	return 1
}

// priceScale is the least power of ten up to 10^4 that makes every class's price integral, 1 when none does.
func priceScale(c plan.Cluster) float64 {
	for scale := 1.0; scale <= 1e4; scale *= 10 {
		integral := true
		for _, sc := range c {
			v := sc.PricePerHour * scale
			integral = integral && math.Abs(v-math.Round(v)) <= 1e-9*max(1, v)
		}
		if integral {
			return scale
		}
	}
	return 1
}

// addServersRows adds one row per class of the cluster bounding its variants' replicas by its servers, and with a
// cost cap a row bounding their price. replicas is the replica columns of each kept variant.
func (m *model) addServersRows(p *milp.Problem, replicas func(kv *keptVariant) []int) {
	c := m.in.cluster()
	terms := map[string][]milp.Term{}
	var cost []milp.Term
	for _, kv := range m.variants {
		class := kv.variant.Class()
		for _, col := range replicas(kv) {
			terms[class] = append(terms[class], milp.Term{Col: col, Coef: 1})
			if price := c.Price(class); price > 0 {
				cost = append(cost, milp.Term{Col: col, Coef: price})
			}
		}
	}
	for _, sc := range c {
		p.AddRow(serversRowName(sc.Name), math.Inf(-1), float64(sc.Servers), terms[sc.Name]...)
	}
	if m.in.MaxCostPerHour > 0 {
		p.AddRow(costRowName, math.Inf(-1), m.in.MaxCostPerHour, cost...)
	}
}

// costRowName is the name of the row that caps the plan's cost (Input.MaxCostPerHour).
const costRowName = "cost per hour"

// addCostTieBreak puts, in the accuracy step of a priced cluster, the plan's cost into the objective at a weight of
// costTieBreak over the whole cluster's price: among plans as accurate, the cheaper.
func (m *model) addCostTieBreak() {
	c := m.in.cluster()
	if m.step != stepAccuracy || !c.Priced() {
		return
	}
	whole := 0.0
	for _, sc := range c {
		whole += float64(sc.Servers) * sc.PricePerHour
	}
	for _, kv := range m.variants {
		price := c.Price(kv.variant.Class())
		for _, col := range kv.replicasCol {
			m.prob.Obj[col] = -costTieBreak * price / whole
		}
	}
}

// integralObjective says the hardware step's objective takes integral values only (every replica's weight is an
// integer): the search may then prune a node whose bound rounds up to the incumbent's.
func (m *model) integralObjective() bool {
	for _, kv := range m.variants {
		if w := m.serverWeight(kv); math.Abs(w-math.Round(w)) > 1e-9*max(1, w) {
			return false
		}
	}
	return true
}

// usedByClass is the servers a result's variants use per class.
func usedByClass(variants []Hosted) map[string]int {
	out := map[string]int{}
	for _, h := range variants {
		out[wire.ClassOf(h.Variant)] += h.Replicas
	}
	return out
}

// usedByClass is the servers point x of the model uses per class.
func (m *model) usedByClass(x []float64) map[string]int {
	out := map[string]int{}
	for _, kv := range m.variants {
		for _, col := range kv.replicasCol {
			out[kv.variant.Class()] += int(math.Round(x[col]))
		}
	}
	return out
}

// addClassAggregates adds, on a cluster of several classes, an integer column per class for the servers of task on
// it, branched on before the task's: "detect has at most 3 fast servers, or at least 4" moves the LP bound where the
// task's servers over every class, whose throughputs differ, do not. Branched on first, they took the accuracy step
// of the classed traffic example at 1100-1500 QPS (one worker) from 4.9 s to 3.7 s in all; alongside the task's, to
// 4.9 s from 7-13 s without them.
func (m *model) addClassAggregates(task string) {
	if len(m.in.cluster()) < 2 {
		return
	}
	p := m.prob
	for _, sc := range m.in.cluster() {
		var terms []milp.Term
		for _, kv := range m.variants {
			if kv.task == task && kv.variant.Class() == sc.Name {
				for _, col := range kv.replicasCol {
					terms = append(terms, milp.Term{Col: col, Coef: 1})
				}
			}
		}
		if len(terms) == 0 {
			continue
		}
		c := p.AddCol("servers of "+task+" on "+sc.Name, 0, 0, float64(sc.Servers), true, priorityTask+1)
		p.AddRow("servers of "+task+" on "+sc.Name, 0, 0, append(terms, milp.Term{Col: c, Coef: -1})...)
	}
}

// demandBound bounds the demand the whole cluster could serve: every server of each class on the root task at its
// class's best throughput.
func (m *model) demandBound() float64 {
	best := map[string]float64{}
	root := m.in.Spec.Root().Name
	for _, kv := range m.variants {
		if kv.task == root {
			class := kv.variant.Class()
			best[class] = max(best[class], slicesMax(kv.throughput))
		}
	}
	bound := 0.0
	for class, b := range best {
		bound += b * float64(m.in.cluster().Servers(class))
	}
	return bound
}

// replicaBound is the most replicas variant k can use at batch index bi: enough for the most traffic that can reach
// it, and never more than the cluster (a tight bound keeps the LP's "replicas at the chosen batch" rows strong).
func (m *model) replicaBound(k, bi int) float64 {
	ub := float64(m.in.classServers(m.variants[k].variant.Name))
	if m.step != stepMaxDemand {
		ub = min(ub, float64(m.variants[k].replicasFor(bi, m.maxLoad[k])))
	}
	return max(ub, 0)
}

// overCap says a hardware plan of objective value cost (serverWeight's units) is over Input.MaxCostPerHour: the
// enumeration's cheapest plan is then no plan, as the MILP's cost row makes it.
func (m *model) overCap(cost float64) bool {
	c := m.in.cluster()
	return m.in.MaxCostPerHour > 0 && c.Priced() && cost > m.in.MaxCostPerHour*priceScale(c)*(1+1e-9)
}
