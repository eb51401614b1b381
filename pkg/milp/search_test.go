package milp

// The search's hooks and prunings: the root heuristic, reduced-cost fixing, strong branching, the cutoff.

import (
	"math"
	"testing"
)

// The root heuristic gets the root's LP point and its point becomes the incumbent before any branching (a search
// stopped after the root already has it); an infeasible one is ignored, and the optimum stands. Past the root it runs
// again at nodes 32, 128, 512... only.
func TestRootHeuristic(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		p := knapsack(seed, 10)
		plain, err := Solve(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		optimum := func(x []float64, _ float64) []float64 {
			calls++
			if len(x) != p.NumCols() {
				t.Errorf("seed %d: the heuristic got %d values for %d columns", seed, len(x), p.NumCols())
			}
			return plain.X
		}
		helped, err := Solve(p, Options{RootHeuristic: optimum})
		if err != nil {
			t.Fatal(err)
		}
		most := 1 // the root, and the nodes heuristicNode picks
		for n := 1; n <= helped.Nodes; n++ {
			if heuristicNode(n) {
				most++
			}
		}
		if calls < 1 || calls > most {
			t.Errorf("seed %d: the heuristic ran %d times in %d nodes, want 1 to %d", seed, calls, helped.Nodes, most)
		}
		calls = 0
		rootOnly, err := Solve(p, Options{RootHeuristic: optimum, MaxNodes: 1})
		if err != nil {
			t.Fatal(err)
		}
		if rootOnly.X == nil || math.Abs(rootOnly.Objective-plain.Objective) > 1e-9 {
			t.Errorf("seed %d: after the root alone, incumbent %v worth %v, want the heuristic's, worth %v", seed,
				rootOnly.X, rootOnly.Objective, plain.Objective)
		}
		bad := make([]float64, p.NumCols())
		for j := range bad {
			bad[j] = p.Upper[j] // breaks the capacity rows
		}
		ignored, err := Solve(p, Options{RootHeuristic: func([]float64, float64) []float64 { return bad }})
		if err != nil {
			t.Fatal(err)
		}
		if calls != 1 {
			t.Errorf("seed %d: the heuristic ran %d times in a solve stopped after the root, want once", seed, calls)
		}
		for name, r := range map[string]Result{"with the optimum as heuristic": helped, "with an infeasible heuristic": ignored} {
			if r.Status != Optimal || math.Abs(r.Objective-plain.Objective) > 1e-9 {
				t.Errorf("seed %d %s: %s %v, want optimal %v", seed, name, r.Status, r.Objective, plain.Objective)
			}
		}
	}
}

// TestFixByReducedCost checks the bounds reduced-cost fixing leaves: a column may move off its bound only as far as
// its reduced cost lets the LP value stay below the incumbent's (less the gap tolerance, or a whole unit when the
// objective is integral).
func TestFixByReducedCost(t *testing.T) {
	p := &Problem{}
	for range 5 {
		p.AddCol("x", 0, 0, 10, true, 0)
	}
	p.Integer[4] = false // continuous: never fixed
	for _, c := range []struct {
		name     string
		integral bool
		inc, obj float64 // minimisation form; inc +Inf: no incumbent
		x, rc    []float64
		lo, up   []float64 // the node's bounds before and after
		wantLo   []float64
		wantUp   []float64
	}{
		{name: "at lower bound", inc: 10, obj: 7,
			x: []float64{0, 0, 2, 4, 0}, rc: []float64{1, 0.5, 0, 0, 5},
			lo: []float64{0, 0, 0, 0, 0}, up: []float64{10, 10, 10, 10, 10},
			wantLo: []float64{0, 0, 0, 0, 0}, wantUp: []float64{2, 5, 10, 10, 10}},
		{name: "at upper bound", inc: 10, obj: 7,
			x: []float64{4, 1, 2, 10, 0}, rc: []float64{-2, 0, 0, -4, 0},
			lo: []float64{0, 0, 0, 0, 0}, up: []float64{4, 10, 10, 10, 10},
			wantLo: []float64{3, 0, 0, 10, 0}, wantUp: []float64{4, 10, 10, 10, 10}},
		{name: "off its bound despite the reduced cost (tolerances)", inc: 10, obj: 7,
			x: []float64{0.5, 0, 0, 0, 0}, rc: []float64{1, 0, 0, 0, 0},
			lo: []float64{0, 0, 0, 0, 0}, up: []float64{10, 10, 10, 10, 10},
			wantLo: []float64{0, 0, 0, 0, 0}, wantUp: []float64{10, 10, 10, 10, 10}},
		{name: "integral objective: a whole unit better", integral: true, inc: 10, obj: 7.5,
			x: []float64{0, 0, 0, 0, 0}, rc: []float64{1, 0.5, 2, 0, 0},
			lo: []float64{0, 0, 0, 0, 0}, up: []float64{10, 10, 10, 10, 10},
			wantLo: []float64{0, 0, 0, 0, 0}, wantUp: []float64{1, 3, 0, 10, 10}},
		{name: "no incumbent", inc: math.Inf(1), obj: 7,
			x: []float64{0, 0, 0, 0, 0}, rc: []float64{1, 1, 1, 1, 1},
			lo: []float64{0, 0, 0, 0, 0}, up: []float64{10, 10, 10, 10, 10},
			wantLo: []float64{0, 0, 0, 0, 0}, wantUp: []float64{10, 10, 10, 10, 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &search{p: p, opt: Options{RelGap: 1e-6, AbsGap: 1e-9, IntegralObjective: c.integral}, inc: c.inc}
			if !math.IsInf(c.inc, 1) {
				s.incX = make([]float64, p.NumCols())
			}
			n := &node{lo: append([]float64(nil), c.lo...), up: append([]float64(nil), c.up...)}
			s.fixByReducedCost(n, c.obj, c.x, c.rc)
			for j := range n.lo {
				if n.lo[j] != c.wantLo[j] || n.up[j] != c.wantUp[j] {
					t.Errorf("column %d: bounds [%v, %v], want [%v, %v]", j, n.lo[j], n.up[j], c.wantLo[j], c.wantUp[j])
				}
			}
		})
	}
}

// TestStrongBranch checks strong branching's estimates against the children's LPs solved to the end: the gain is
// never more than the child's (the dual simplex's objective only rises), infeasible only when the child is, and the
// bound, raised only when the estimate's LP finished, never above the child's LP value. Random packing problems
// with many rows make some estimates stop at the iteration limit and others finish.
func TestStrongBranch(t *testing.T) {
	finished, stopped := 0, 0
	for seed := uint64(0); seed < 40; seed++ {
		p := packing(seed, 20, 12)
		s := &search{p: p, opt: Options{RelGap: 1e-6, AbsGap: 1e-9}, inc: math.Inf(1)}
		lp := newRelaxation(p)
		n := &node{lo: append([]float64(nil), p.Lower...), up: append([]float64(nil), p.Upper...)}
		st, obj, x := lp.solve(n.lo, n.up, nil)
		if st != lpOptimal {
			t.Fatalf("seed %d: root LP %v", seed, st)
		}
		b := lp.basis()
		for j := range p.NumCols() {
			f := x[j] - math.Floor(x[j])
			if f < intTol || f > 1-intTol {
				continue
			}
			for _, child := range [][2]float64{{n.lo[j], math.Floor(x[j])}, {math.Ceil(x[j]), n.up[j]}} {
				s.mu.Lock() // strongBranch releases it while its LP solves
				e := s.strongBranch(lp, n, j, child[0], child[1], obj, b)
				s.mu.Unlock()
				if n.lo[j] != p.Lower[j] || n.up[j] != p.Upper[j] {
					t.Fatalf("seed %d column %d: the node's bounds were not restored", seed, j)
				}
				lo, up := append([]float64(nil), n.lo...), append([]float64(nil), n.up...)
				lo[j], up[j] = child[0], child[1]
				st, v, _ := lp.solve(lo, up, b)
				if st == lpInfeasible {
					v = math.Inf(1)
				}
				if math.IsInf(e.gain, 1) && !math.IsInf(v, 1) {
					t.Errorf("seed %d column %d in %v: gain %v, but the child's LP is %v", seed, j, child, e.gain, v)
				}
				if e.gain < 0 || obj+e.gain > v+1e-7 || e.bound > v+1e-7 || e.bound < obj {
					t.Errorf("seed %d column %d in %v: parent %v, gain %v, bound %v; the child's LP %v", seed, j,
						child, obj, e.gain, e.bound, v)
				}
				switch {
				case e.bound > obj:
					finished++
				case v > obj+1e-7 && !math.IsInf(v, 1):
					stopped++
				}
			}
		}
	}
	if finished == 0 || stopped == 0 {
		t.Errorf("estimates that finished: %d, stopped at the limit short of the child's value: %d; want both", finished,
			stopped)
	}
	t.Logf("estimates that finished: %d, stopped short: %d", finished, stopped)
}

// TestHeuristicAtDeeperNodes: past the root, the heuristic runs again from the LPs of nodes 32, 128, 512..., and
// a point it finds there becomes the incumbent.
func TestHeuristicAtDeeperNodes(t *testing.T) {
	checked := 0
	defer func() {
		if checked == 0 {
			t.Error("no instance needed 64 nodes")
		}
	}()
	for seed := uint64(1); seed <= 10; seed++ {
		p := knapsack(seed, 60)
		plain, err := Solve(p, Options{Workers: 1, NoStrongBranching: true})
		if err != nil {
			t.Fatal(err)
		}
		if plain.Nodes < 64 {
			continue // too easy to reach node 32 with a heuristic's pruning
		}
		checked++
		calls := 0
		late := func(x []float64, _ float64) []float64 {
			if calls++; calls == 1 {
				return nil // nothing at the root
			}
			return plain.X
		}
		res, err := Solve(p, Options{Workers: 1, NoStrongBranching: true, RootHeuristic: late})
		if err != nil {
			t.Fatal(err)
		}
		if calls < 2 || res.Nodes >= plain.Nodes {
			t.Errorf("seed %d: the heuristic ran %d times in %d nodes (%d without its point)", seed, calls, res.Nodes,
				plain.Nodes)
		}
	}
}

// A cutoff prunes what cannot beat it: at the optimum's own value no point is better (Infeasible); just worse than
// the optimum, the search finds the optimum in no more nodes than without it, and in fewer on some seeds.
func TestCutoff(t *testing.T) {
	fewer := 0
	for seed := uint64(1); seed <= 20; seed++ {
		p := knapsack(seed, 30)
		plain, err := Solve(p, Options{Workers: 1, NoStrongBranching: true})
		if err != nil {
			t.Fatal(err)
		}
		at, err := Solve(p, Options{Workers: 1, NoStrongBranching: true, Cutoff: plain.Objective, UseCutoff: true})
		if err != nil {
			t.Fatal(err)
		}
		if at.Status != Infeasible || at.X != nil {
			t.Errorf("seed %d: cutoff at the optimum %v: %s with %v, want infeasible", seed, plain.Objective, at.Status,
				at.X)
		}
		below, err := Solve(p, Options{Workers: 1, NoStrongBranching: true, Cutoff: plain.Objective - 1,
			UseCutoff: true})
		if err != nil {
			t.Fatal(err)
		}
		if below.Status != Optimal || math.Abs(below.Objective-plain.Objective) > 1e-9 || below.Nodes > plain.Nodes {
			t.Errorf("seed %d: cutoff just below the optimum: %s %v in %d nodes, want optimal %v in at most %d", seed,
				below.Status, below.Objective, below.Nodes, plain.Objective, plain.Nodes)
		}
		if below.Nodes < plain.Nodes {
			fewer++
		}
	}
	if fewer == 0 {
		t.Error("the cutoff pruned no node on any seed")
	}
}
