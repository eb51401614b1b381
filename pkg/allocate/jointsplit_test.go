package allocate

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// splitCases are joint accuracy steps small enough for the joint MILP to prove: pipelines of the examples in the
// accuracy step on fewer servers than they would use alone, and seeded random pipelines (randomInstance), two to
// four, with a copy among them (one f for two pipelines) in some.
func splitCases(t *testing.T) []JointInput {
	traffic, ocr, social := loadSpec(t, "traffic.yaml", 0), loadSpec(t, "ocr-chain.yaml", 0), loadSpec(t, "social.yaml", 0)
	copyOf := func(s *pipeline.Spec, name string) *pipeline.Spec {
		c := *s
		c.Name = name
		return &c
	}
	cases := []JointInput{
		{Servers: 20, Pipelines: []Input{{Spec: traffic, Demand: 300, Utilization: 0.85}, {Spec: ocr, Demand: 20,
			Utilization: 0.85}}},
		{Servers: 22, Pipelines: []Input{{Spec: social, Demand: 150, Utilization: 0.85},
			{Spec: copyOf(social, "social-2"), Demand: 150, Utilization: 0.85}, {Spec: ocr, Demand: 200}}},
	}
	for k, seed := 0, uint64(4000); k < 8; k++ {
		var in JointInput
		for i := 0; i < 2+k%2; i++ {
			p := randomInstance(seed)
			for ; ; p = randomInstance(seed) { // a pipeline some plan fits
				seed++
				if _, err := build(p, stepAccuracy); err == nil {
					break
				}
			}
			p.Demand *= 0.3 + 0.1*float64(k%3)
			in.Servers += p.Servers
			in.Pipelines = append(in.Pipelines, p)
		}
		if k%2 == 1 {
			c := in.Pipelines[0]
			c.Spec = copyOf(c.Spec, c.Spec.Name+"-copy")
			in.Servers += c.Servers
			in.Pipelines = append(in.Pipelines, c)
		}
		in.Servers = max(2, in.Servers*(5+k%2)/6)
		cases = append(cases, in)
	}
	return cases
}

// accuracyStep is the joint accuracy step of in's pipelines (one class, none kept) as SolveJoint sets it up, by
// decomposition (ok false when it does not apply) and by the joint MILP, each in a jointSolve of its own.
func accuracyStep(t *testing.T, in JointInput, opt Options) (split milp.Result, ok bool, whole milp.Result) {
	t.Helper()
	solve := func(useSplit bool) (milp.Result, bool) {
		s := &jointSolve{in: in, opt: opt, level: map[int]float64{},
			res: &JointResult{Pipelines: make([]*Result, len(in.Pipelines))}}
		total := 0.0
		for _, p := range in.Pipelines {
			total += p.Demand
		}
		var parts []*jointPart
		for p := range in.Pipelines {
			m, err := build(s.pipeline(p, in.cluster()), stepAccuracy)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, &jointPart{p: p, m: m, weight: share(in.Pipelines[p].Demand, total,
				len(in.Pipelines)), mode: ModeAccuracy})
		}
		if useSplit {
			sol, ok, err := s.splitAccuracy(parts, 0, in.cluster())
			if err != nil {
				t.Fatal(err)
			}
			return sol, ok
		}
		sol, err := s.solveWith(parts, 0, in.cluster(), false)
		if err != nil {
			t.Fatal(err)
		}
		return sol, true
	}
	split, ok = solve(true)
	whole, _ = solve(false)
	return split, ok, whole
}

// TestJointSplitIsJointMILP: on every case where the joint MILP proves its optimum, the decomposition proves the
// same optimum; stopped early (a gap of 5%, a node limit of 2 per search), its point is feasible and no better
// than the optimum, and its bound is no lower.
func TestJointSplitIsJointMILP(t *testing.T) {
	compared := 0
	for i, in := range splitCases(t) {
		name := fmt.Sprintf("case %d (%d pipelines, %d servers)", i, len(in.Pipelines), in.Servers)
		began := time.Now()
		split, ok, whole := accuracyStep(t, in, Options{Workers: 1})
		t.Logf("%s: %v", name, time.Since(began).Round(time.Millisecond))
		if whole.Status != milp.Optimal {
			t.Logf("%s: the joint MILP says %s; not compared", name, whole.Status)
			continue
		}
		if !provesTheOptimum(t, name, split, ok, whole) {
			continue
		}
		compared++
		for _, opt := range []Options{{Workers: 1, Gap: 0.05}, {Workers: 1, MaxNodes: 10}} {
			if i%2 == 1 {
				break // the suite's time
			}
			early, ok, _ := accuracyStep(t, in, opt)
			if !ok {
				continue // no point in some search: the joint MILP decides
			}
			tol := 2e-6 * math.Abs(whole.Objective)
			bound := early.Bound
			if early.Status == milp.Optimal { // within its gap of its point
				bound = early.Objective * (1 + max(opt.Gap, 1e-6))
			}
			if early.X == nil || early.Objective > whole.Objective+tol || bound < whole.Objective-tol {
				t.Errorf("%s, stopped early (%+v): %s at %.9f, bound %.9f; the optimum %.9f", name, opt,
					early.Status, early.Objective, bound, whole.Objective)
			}
		}
	}
	if compared < 7 {
		t.Errorf("only %d cases compared", compared)
	}
}

// TestJointSplitInSolveJoint: SolveJoint plans by decomposition what the joint MILP plans: each pipeline's mode and
// demand served, and the class's objective (each pipeline's accuracy weighted by its share of the demand) within
// the solver's gap.
func TestJointSplitInSolveJoint(t *testing.T) {
	objective := func(in JointInput, r *JointResult) float64 {
		total, v := 0.0, 0.0
		for _, p := range in.Pipelines {
			total += p.Demand
		}
		for k, p := range r.Pipelines {
			v += in.Pipelines[k].Demand / total * p.SystemAccuracy
		}
		return v
	}
	for i, in := range splitCases(t)[:2] {
		split, err := SolveJoint(in, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		in.wholeMILP = true
		whole, err := SolveJoint(in, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		a, b := objective(in, split), objective(in, whole)
		t.Logf("case %d: decomposition %.6f in %.0f ms, joint MILP %.6f in %.0f ms", i, a, split.SolveMs, b,
			whole.SolveMs)
		if !split.Optimal || split.ServersUsed > in.Servers || math.Abs(a-b) > 2e-6*b {
			t.Errorf("case %d: decomposition optimal %v on %d servers at %.9f; joint MILP at %.9f", i, split.Optimal,
				split.ServersUsed, a, b)
		}
		for k, r := range split.Pipelines {
			if r.Mode != whole.Pipelines[k].Mode || r.ServedQPS != whole.Pipelines[k].ServedQPS {
				t.Errorf("case %d, pipeline %d: %s serving %v; joint MILP %s serving %v", i, k, r.Mode, r.ServedQPS,
					whole.Pipelines[k].Mode, whole.Pipelines[k].ServedQPS)
			}
		}
	}
}

// provesTheOptimum says the decomposition applied and proved an optimum (reported as an error when not), and reports
// an optimum other than whole's, the joint MILP's.
func provesTheOptimum(t *testing.T, name string, split milp.Result, ok bool, whole milp.Result) bool {
	t.Helper()
	if !ok || split.Status != milp.Optimal {
		t.Errorf("%s: the decomposition applies %v, says %s (%v, gap %v); the joint MILP's optimum %.9f", name,
			ok, split.Status, split.Objective, split.Gap, whole.Objective)
		return false
	}
	if d := math.Abs(split.Objective - whole.Objective); d > 2e-6*math.Abs(whole.Objective) {
		t.Errorf("%s: the decomposition's optimum %.9f, the joint MILP's %.9f", name, split.Objective, whole.Objective)
	}
	return true
}
