package allocate

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// classSplitCases are joint accuracy steps on two server classes, priced, small enough for the joint MILP to prove:
// seeded random pipelines (randomInstance) with every variant also on a fast class (withFastClass), two or three,
// with a copy in some (one f for two pipelines); those whose flow columns would be generated are left out (a joint
// plan does not do that).
func classSplitCases(t *testing.T) []JointInput {
	cluster := func(servers, fast int) plan.Cluster {
		return plan.NewCluster(map[string]int{wire.DefaultClass: servers, "fast": fast},
			plan.Prices{wire.DefaultClass: 1, "fast": 2.5})
	}
	var cases []JointInput
	for k, seed := 0, uint64(4100); len(cases) < 8; k++ {
		in := JointInput{}
		servers := 0
		for i := 0; i < 2+k%2; i++ {
			for ; ; seed++ { // a pipeline some plan fits
				p := randomInstance(seed)
				if _, err := build(p, stepAccuracy); err == nil {
					p.Spec = withFastClass(t, p.Spec, "fast", 1.5+0.5*float64(k%3))
					p.Demand *= 0.4 + 0.1*float64(k%3)
					servers += p.Servers
					in.Pipelines = append(in.Pipelines, p)
					seed++
					break
				}
			}
		}
		if k%2 == 0 {
			c := in.Pipelines[0]
			s := *c.Spec
			s.Name += "-copy"
			c.Spec = &s
			servers += c.Servers
			in.Pipelines = append(in.Pipelines, c)
		}
		in.Cluster = cluster(max(2, servers*2/3), max(1, servers/5))
		listed := true
		for _, p := range in.Pipelines {
			p.Cluster = in.Cluster
			m, err := build(p, stepAccuracy)
			listed = listed && (err != nil || !m.priced)
		}
		if listed {
			cases = append(cases, in)
		}
	}
	return cases
}

// TestJointSplitOnTwoClasses: on two server classes the decomposition applies and, on every case where the joint
// MILP proves its optimum, proves the same optimum (where the joint MILP proves there is none, it does not apply:
// the joint MILP decides); stopped early (a 5% gap), its point is no better than the optimum and its bound no
// lower.
func TestJointSplitOnTwoClasses(t *testing.T) {
	compared := 0
	for i, in := range classSplitCases(t) {
		name := fmt.Sprintf("case %d (%d pipelines, %v)", i, len(in.Pipelines), in.Cluster)
		began := time.Now()
		split, ok, whole := accuracyStep(t, in, Options{Workers: 1})
		t.Logf("%s: %v, decomposition %v %s %.9f, joint MILP %s %.9f", name, time.Since(began).Round(time.Millisecond),
			ok, split.Status, split.Objective, whole.Status, whole.Objective)
		switch {
		case whole.Status == milp.Infeasible:
			if ok {
				t.Errorf("%s: the decomposition found %.9f where the joint MILP has no point", name, split.Objective)
			}
			continue
		case whole.Status != milp.Optimal || !provesTheOptimum(t, name, split, ok, whole):
			continue
		}
		compared++
		if i%2 == 1 {
			continue // the suite's time
		}
		early, ok, _ := accuracyStep(t, in, Options{Workers: 1, Gap: 0.05})
		if !ok {
			continue
		}
		tol := 2e-6 * math.Abs(whole.Objective)
		bound := early.Bound
		if early.Status == milp.Optimal {
			bound = early.Objective * 1.05
		}
		if early.X == nil || early.Objective > whole.Objective+tol || bound < whole.Objective-tol {
			t.Errorf("%s, stopped early: %s at %.9f, bound %.9f; the optimum %.9f", name, early.Status,
				early.Objective, bound, whole.Objective)
		}
	}
	if compared < 5 {
		t.Errorf("only %d cases compared", compared)
	}
}

// TestJointSplitPricedBound: the priced bound (the one at scale, forced here on small cases) is a bound: on every
// case where the joint MILP proves its optimum, the decomposition's point is no better than it and its bound no
// lower, and it proves the optimum on most; with two workers too (different functions' relaxations and searches at
// once, each search's root from its relaxation's basis).
func TestJointSplitPricedBound(t *testing.T) {
	for _, workers := range []int{1, 2} {
		compared, proven := 0, 0
		for i, in := range classSplitCases(t) {
			in.pricedBound = true
			split, ok, whole := accuracyStep(t, in, Options{Workers: workers})
			if whole.Status != milp.Optimal || !ok {
				continue
			}
			compared++
			tol := 2e-6 * math.Abs(whole.Objective)
			bound := split.Bound
			if split.Status == milp.Optimal {
				proven++
				bound = split.Objective + tol
			}
			t.Logf("%d workers, case %d: %s %.9f, bound %.9f; the optimum %.9f", workers, i, split.Status,
				split.Objective, bound, whole.Objective)
			if split.X == nil || split.Objective > whole.Objective+tol || bound < whole.Objective-tol {
				t.Errorf("%d workers, case %d: %s at %.9f, bound %.9f; the optimum %.9f", workers, i, split.Status,
					split.Objective, bound, whole.Objective)
			}
		}
		if compared < 5 || proven < compared/2 {
			t.Errorf("%d workers: %d cases compared, %d proven optimal", workers, compared, proven)
		}
	}
}

// TestJointSplitPeerSeeds: copies of one pipeline at different demands on two classes have models of the same
// columns (peers: a copy's first search starts from another's point, peerSeed), and with them the decomposition
// proves the joint MILP's optimum, with one worker and with two.
func TestJointSplitPeerSeeds(t *testing.T) {
	compared := 0
	for i, base := range classSplitCases(t) {
		if compared >= 4 {
			break // the suite's time: a larger case's joint MILP takes a minute
		}
		in := JointInput{Cluster: base.Cluster}
		var names [][]string
		for c, f := range []float64{0.5, 0.4, 0.6} {
			p := base.Pipelines[0]
			s := *p.Spec
			s.Name = fmt.Sprintf("%s-%d", s.Name, c)
			p.Spec, p.Demand = &s, p.Demand*f
			in.Pipelines = append(in.Pipelines, p)
			p.Cluster = in.Cluster
			if m, err := build(p, stepAccuracy); err == nil {
				names = append(names, m.prob.Names)
			}
		}
		if len(names) < 3 || !slices.Equal(names[0], names[1]) || !slices.Equal(names[0], names[2]) {
			continue
		}
		for _, workers := range []int{1, 2} {
			name := fmt.Sprintf("case %d, %d workers", i, workers)
			split, ok, whole := accuracyStep(t, in, Options{Workers: workers})
			t.Logf("%s: decomposition %v %s %.9f, joint MILP %s %.9f", name, ok, split.Status, split.Objective,
				whole.Status, whole.Objective)
			if whole.Status == milp.Optimal && provesTheOptimum(t, name, split, ok, whole) {
				compared++
			}
		}
	}
	if compared < 4 {
		t.Errorf("only %d cases compared", compared)
	}
}
