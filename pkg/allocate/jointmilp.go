// The joint MILP: the pipelines' models side by side, one servers row, an objective per class and floors for the
// classes above.

package allocate

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// levelTolerance is how much of its level a class kept may give up while a lower class is planned: the relative
// tolerance of a floor, so that the solution that set the level meets it despite rounding. At 1e-7 the LPs met a
// floor with a flow of 1e-4 through a variant with no replicas, within Clp's tolerances (TestJointCrossCheckWithCBC).
const levelTolerance = 1e-6

// jointProblem writes parts' models one after the other into one problem (sideBySide), setting each part's off.
func jointProblem(parts []*jointPart, servers plan.Cluster) (*milp.Problem, error) {
	probs, names := make([]*milp.Problem, len(parts)), make([]string, len(parts))
	for i, pt := range parts {
		if pt.m.priced {
			return nil, fmt.Errorf("%w: pipeline %s's flow columns are generated while solving, which a joint "+
				"allocation does not do", ErrModelTooLarge, pt.m.in.Spec.Name)
		}
		probs[i], names[i] = pt.m.prob, pt.m.in.Spec.Name
	}
	p, offs, err := sideBySide(probs, names, servers)
	for i, pt := range parts {
		pt.off = offs[i]
	}
	return p, err
}

// sideBySide writes problems one after the other into one (returning where each one's columns start): their
// columns and rows as they are, with no objective, but their servers rows, which become one per class over the
// class's servers. Column names get the pipeline's name when there are several.
func sideBySide(probs []*milp.Problem, names []string, servers plan.Cluster) (*milp.Problem, []int, error) {
	p := &milp.Problem{}
	offs := make([]int, len(probs))
	shared := map[string]int{} // class -> its servers row
	for k, q := range probs {
		off := p.NumCols()
		offs[k] = off
		for j := range q.Obj {
			name := q.Names[j]
			if len(probs) > 1 {
				name = names[k] + ": " + name
			}
			p.AddCol(name, 0, q.Lower[j], q.Upper[j], q.Integer[j], q.Priority[j])
		}
		own := 0
		for _, row := range q.Rows {
			terms := make([]milp.Term, len(row.Terms))
			for i, t := range row.Terms {
				terms[i] = milp.Term{Col: t.Col + off, Coef: t.Coef}
			}
			class, ok := classOfServersRow(row.Name)
			if !ok {
				p.AddRow(row.Name, row.Lo, row.Hi, terms...)
				continue
			}
			own++
			if r, ok := shared[class]; ok {
				p.Rows[r].Terms = append(p.Rows[r].Terms, terms...)
			} else {
				shared[class] = p.AddRow(row.Name, math.Inf(-1), float64(servers.Servers(class)), terms...)
			}
		}
		if own != len(servers) {
			return nil, offs, fmt.Errorf("allocate: pipeline %s's model has %d servers rows, want one per class (%d)",
				names[k], own, len(servers))
		}
	}
	return p, offs, nil
}

// classObjective is the objective of class's parts in p: in the accuracy step the accuracy served per second over
// the class's demand (each model's objective, its system accuracy, times its weight), in the max-demand step the
// requests per second served.
func classObjective(parts []*jointPart, class int) []milp.Term {
	var terms []milp.Term
	for _, pt := range parts {
		if pt.class != class {
			continue
		}
		if pt.m.step == stepMaxDemand {
			terms = append(terms, milp.Term{Col: pt.off + pt.m.demandCol, Coef: 1})
			continue
		}
		for j, c := range pt.m.prob.Obj {
			if c != 0 {
				terms = append(terms, milp.Term{Col: pt.off + j, Coef: pt.weight * c})
			}
		}
	}
	return terms
}

// solveWith solves the joint MILP of the classes kept and parts (class's pipelines) on the servers left, with
// class's objective and a floor per class kept. An accuracy step that finds a plan keeps parts with its level.
func (s *jointSolve) solveWith(parts []*jointPart, class int, left plan.Cluster, maxDemand bool) (milp.Result,
	error) {
	p, all, err := s.jointMILP(parts, class, left, maxDemand)
	if err != nil {
		return milp.Result{}, err
	}
	o := all[0].m.milpOptions(s.opt)
	o.RootHeuristic = jointHeuristic(p, all, s.opt)
	sol, err := milp.Solve(p, o)
	s.res.Nodes += sol.Nodes
	if err != nil || sol.X == nil || maxDemand {
		return sol, err
	}
	s.kept, s.sol = all, sol
	s.level[class] = p.Value(sol.X)
	return sol, nil
}

// jointMILP is solveWith's MILP and its parts, the classes kept first.
func (s *jointSolve) jointMILP(parts []*jointPart, class int, left plan.Cluster, maxDemand bool) (*milp.Problem,
	[]*jointPart, error) {
	all := append(append([]*jointPart(nil), s.kept...), parts...)
	p, err := jointProblem(all, left)
	if err != nil {
		return nil, nil, err
	}
	p.Sense = milp.Maximize
	for _, t := range classObjective(all, class) {
		p.Obj[t.Col] = t.Coef
	}
	for _, pt := range parts {
		if maxDemand && len(parts) > 1 { // one pipeline's max is below its demand: its accuracy step failed
			col := pt.off + pt.m.demandCol
			p.Upper[col] = min(p.Upper[col], s.in.Pipelines[pt.p].Demand)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.level)) {
		level := s.level[k]
		p.AddRow(fmt.Sprintf("accuracy of class %d", k), level-levelTolerance*max(1, math.Abs(level)), math.Inf(1),
			classObjective(all, k)...)
	}
	return p, all, nil
}

// jointHeuristic is the joint MILP's first point from its root LP's x, found as each model finds its own
// (fixedBatchIncumbent): every model's batch sizes fixed from its part of x, then the restricted joint MILP, whose
// servers they share, solved with a node limit.
func jointHeuristic(p *milp.Problem, parts []*jointPart, opt Options) func(x []float64, best float64) []float64 {
	return func(x []float64, best float64) []float64 {
		sub := *p
		sub.Lower = append([]float64(nil), p.Lower...)
		sub.Upper = append([]float64(nil), p.Upper...)
		for _, pt := range parts {
			end := pt.off + pt.m.prob.NumCols()
			pt.m.restrictToBatches(pt.m.fixedBatches(x[pt.off:end]), sub.Lower[pt.off:end], sub.Upper[pt.off:end])
		}
		return solveRestricted(&sub, best, opt)
	}
}

// hardwareTogether solves the hardware step of parts (each pipeline's model at its most accurate) as one MILP on the
// servers left, the sum of their costs its objective: on several classes, where each one's cheapest plan does not
// fit beside the others'. It returns the servers used per class, nil when there is no such plan.
func (s *jointSolve) hardwareTogether(parts []*jointPart, left plan.Cluster) (map[string]int, error) {
	p, err := jointProblem(parts, left)
	if err != nil {
		return nil, err
	}
	integral := true
	for _, pt := range parts {
		for j, c := range pt.m.prob.Obj {
			p.Obj[pt.off+j] = c
		}
		integral = integral && pt.m.integralObjective()
	}
	o := parts[0].m.milpOptions(s.opt)
	o.Incumbent, o.IntegralObjective = nil, integral
	sol, err := milp.Solve(p, o)
	s.res.Nodes += sol.Nodes
	if err != nil || sol.X == nil {
		return nil, err
	}
	used := map[string]int{}
	for _, pt := range parts {
		x := sol.X[pt.off : pt.off+pt.m.prob.NumCols()]
		for class, n := range pt.m.usedByClass(x) {
			used[class] += n
		}
		s.read(pt, sol)
	}
	return used, nil
}
