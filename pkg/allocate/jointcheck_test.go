package allocate

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestJointCrossCheckWithCBC: joint MILPs of two or three small random pipelines sharing fewer servers than they
// have alone, under both latency models: the accuracy step of one class, the max-demand step, and a low class's
// accuracy step under the floor of a high class solved first. CBC solves the same joint problem written with each
// pipeline's complete model (the paper's form, export.go; in the max-demand step, where that takes CBC minutes, our
// joint problem): statuses and optima must agree, and our solution must satisfy the complete joint problem.
func TestJointCrossCheckWithCBC(t *testing.T) {
	skipWithoutCBC(t)
	n := 12
	if testing.Short() {
		n = 6
	}
	compared, optimal := 0, 0
	for k := 0; k < n; k++ {
		for _, lm := range []LatencyModel{LatencyBurst, LatencyLoki} {
			var in JointInput
			for i := 0; i < 2; i++ {
				p := randomInstance(uint64(1000 + 3*k + i))
				p.LatencyModel = lm
				p.Demand *= 0.2 + 0.1*float64(k%4) // several pipelines: a share of what fits one alone
				in.Servers += p.Servers
				in.Pipelines = append(in.Pipelines, p)
			}
			in.Servers = max(2, in.Servers*(4+k%3)/6) // from two thirds of their servers alone to all
			for _, c := range []struct {
				name      string
				maxDemand bool
				classes   bool // the first pipeline in a class of its own, solved first
			}{{"accuracy", false, false}, {"max-demand", true, false}, {"under a floor", false, true}} {
				name := fmt.Sprintf("pair %d (%s, %d servers) %s", k, lm, in.Servers, c.name)
				st, ok := crossCheckJoint(t, name, in, c.maxDemand, c.classes)
				if ok {
					compared++
					if st == milp.Optimal && !c.maxDemand {
						optimal++
					}
				}
			}
		}
	}
	if compared < n || optimal < n/2 {
		t.Errorf("only %d joint models compared, %d accuracy steps with an optimum", compared, optimal)
	}
	t.Logf("%d joint models compared with CBC, %d accuracy steps with an optimum", compared, optimal)
}

// crossCheckJoint solves one joint MILP (see TestJointCrossCheckWithCBC) and compares it with CBC; ok is false when
// there was nothing to compare (a pipeline no variant fits, or the high class had no plan).
func crossCheckJoint(t *testing.T, name string, in JointInput, maxDemand, classes bool) (milp.Status, bool) {
	t.Helper()
	s := &jointSolve{in: in, opt: Options{TimeLimit: 10 * time.Second}, level: map[int]float64{},
		res: &JointResult{Pipelines: make([]*Result, len(in.Pipelines))}}
	st := stepAccuracy
	if maxDemand {
		st = stepMaxDemand
	}
	var parts []*jointPart
	for p := range in.Pipelines {
		m, err := build(s.pipeline(p, in.cluster()), st)
		if err != nil || m.priced {
			return "", false
		}
		parts = append(parts, &jointPart{p: p, m: m, weight: 1 / float64(len(in.Pipelines))})
	}
	if classes {
		parts[0].class = 1
		if sol, err := s.solveWith(parts[:1], 1, in.cluster(), false); err != nil || sol.X == nil {
			return "", false
		}
		parts = parts[1:]
	}
	p, all, err := s.jointMILP(parts, 0, in.cluster(), maxDemand)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := s.solveWith(parts, 0, in.cluster(), maxDemand)
	if err != nil {
		t.Fatal(err)
	}
	cp, point := completeJoint(t, p, all, in.cluster())
	// CBC takes minutes on some max-demand steps' complete (big-M) models: there it solves the same joint problem as
	// ours, which must still satisfy the complete one.
	toCBC := cp
	if maxDemand {
		toCBC = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cst, cobj, err := milp.SolveCBC(ctx, toCBC)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if ours.Status == milp.Limit {
		t.Logf("%s: stopped at the time limit; not compared", name)
		return "", false
	}
	if ours.Status != cst {
		t.Errorf("%s: we say %s (%v), CBC says %s (%v)", name, ours.Status, ours.Objective, cst, cobj)
		return cst, true
	}
	if cst == milp.Optimal {
		if d := math.Abs(ours.Objective - cobj); d > 1e-5*max(1, math.Abs(cobj)) {
			t.Errorf("%s: objective %.9g, CBC %.9g", name, ours.Objective, cobj)
		}
		if x := point(ours.X); cp.Violation(x) > 1e-6 {
			logViolations(t, cp, x)
			t.Errorf("%s: our solution violates the complete joint problem by %g", name, cp.Violation(x))
		}
	}
	return cst, true
}

// completeJoint is the joint problem p of parts all written over their complete models (export.go): their
// objectives, p's demand bounds and floors; point maps a point of p onto it.
func completeJoint(t *testing.T, p *milp.Problem, all []*jointPart, servers plan.Cluster) (*milp.Problem,
	func([]float64) []float64) {
	probs, names := make([]*milp.Problem, len(all)), make([]string, len(all))
	points := make([]func([]float64) []float64, len(all))
	for i, pt := range all {
		probs[i], points[i] = pt.m.complete()
		names[i] = pt.m.in.Spec.Name
	}
	cp, offs, err := sideBySide(probs, names, servers)
	if err != nil {
		t.Fatal(err)
	}
	cp.Sense = milp.Maximize
	objective := func(class int) []milp.Term {
		var terms []milp.Term
		for i, pt := range all {
			w := pt.weight
			if pt.m.step == stepMaxDemand {
				w = 1
			}
			for j, c := range probs[i].Obj {
				if c != 0 && pt.class == class {
					terms = append(terms, milp.Term{Col: offs[i] + j, Coef: w * c})
				}
			}
		}
		return terms
	}
	for _, tm := range objective(0) {
		cp.Obj[tm.Col] = tm.Coef
	}
	for i, pt := range all {
		cp.Upper[offs[i]+pt.m.demandCol] = p.Upper[pt.off+pt.m.demandCol]
	}
	for _, row := range p.Rows {
		if strings.HasPrefix(row.Name, "accuracy of class 1") {
			cp.AddRow(row.Name, row.Lo, row.Hi, objective(1)...)
		}
	}
	return cp, func(x []float64) []float64 {
		out := make([]float64, cp.NumCols())
		for i, pt := range all {
			copy(out[offs[i]:], points[i](x[pt.off:pt.off+pt.m.prob.NumCols()]))
		}
		return out
	}
}

// logViolations logs the bounds and rows of p that x breaks.
func logViolations(t *testing.T, p *milp.Problem, x []float64) {
	for j := range p.Obj {
		if p.Lower[j]-x[j] > 1e-6 || x[j]-p.Upper[j] > 1e-6 {
			t.Logf("column %s = %v, not in [%v, %v]", p.Names[j], x[j], p.Lower[j], p.Upper[j])
		}
	}
	for _, r := range p.Rows {
		s := 0.0
		for _, tm := range r.Terms {
			s += tm.Coef * x[tm.Col]
		}
		if r.Lo-s > 1e-6 || s-r.Hi > 1e-6 {
			t.Logf("row %s = %v, not in [%v, %v]", r.Name, s, r.Lo, r.Hi)
		}
	}
}
