package milp

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// knapsack: maximise value with two capacity rows, integer counts 0..3.
func knapsack(seed uint64, n int) *Problem {
	r := rand.New(rand.NewPCG(seed, 1))
	p := &Problem{Sense: Maximize}
	var w1, w2 []Term
	for j := 0; j < n; j++ {
		c := p.AddCol("x", float64(1+r.IntN(20)), 0, 3, true, 0)
		w1 = append(w1, Term{c, float64(1 + r.IntN(9))})
		w2 = append(w2, Term{c, float64(1 + r.IntN(9))})
	}
	p.AddRow("w1", math.Inf(-1), float64(5+r.IntN(20)), w1...)
	p.AddRow("w2", math.Inf(-1), float64(5+r.IntN(20)), w2...)
	return p
}

// bruteForce enumerates every integer point of a pure-integer problem with small bounds.
func bruteForce(p *Problem) (float64, bool) {
	n := p.NumCols()
	x := make([]float64, n)
	best, found := math.Inf(-1), false
	var rec func(j int)
	rec = func(j int) {
		if j == n {
			if p.Violation(x) <= 1e-9 {
				v := p.Value(x)
				if p.Sense == Minimize {
					v = -v
				}
				if v > best {
					best, found = v, true
				}
			}
			return
		}
		for v := p.Lower[j]; v <= p.Upper[j]; v++ {
			x[j] = v
			rec(j + 1)
		}
	}
	rec(0)
	if p.Sense == Minimize {
		best = -best
	}
	return best, found
}

// packing: maximise value with rows random packing rows over cols integer columns of bounds 0..1-4; branch-and-bound
// takes tens to hundreds of nodes at 30 columns.
func packing(seed uint64, cols, rows int) *Problem {
	r := rand.New(rand.NewPCG(seed, 2))
	p := &Problem{Sense: Maximize}
	for range cols {
		p.AddCol("x", float64(1+r.IntN(20)), 0, float64(1+r.IntN(4)), true, 0)
	}
	for range rows {
		var terms []Term
		for j := range p.NumCols() {
			if r.IntN(2) == 0 {
				terms = append(terms, Term{j, float64(1 + r.IntN(9))})
			}
		}
		p.AddRow("w", math.Inf(-1), float64(10+r.IntN(30)), terms...)
	}
	return p
}

func TestSolveMatchesBruteForceAndCBC(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		p := knapsack(seed, 6)
		want, ok := bruteForce(p)
		for name, opt := range map[string]Options{"one worker": {}, "two workers": {Workers: 2},
			"no strong branching": {NoStrongBranching: true}} {
			res, err := Solve(p, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !ok || res.Status != Optimal {
				t.Fatalf("seed %d, %s: status %s, brute force found %v", seed, name, res.Status, ok)
			}
			if math.Abs(res.Objective-want) > 1e-6 {
				t.Fatalf("seed %d, %s: objective %v, brute force %v", seed, name, res.Objective, want)
			}
			if v := p.Violation(res.X); v > 1e-6 {
				t.Fatalf("seed %d, %s: solution violates the problem by %g", seed, name, v)
			}
		}
		st, obj, err := SolveCBC(context.Background(), p)
		if errors.Is(err, ErrNoCBC) {
			if seed == 0 {
				t.Log("skipping the CBC cross-check: ", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if st != Optimal || math.Abs(obj-want) > 1e-6 {
			t.Fatalf("seed %d: CBC says %s %v, brute force %v", seed, st, obj, want)
		}
	}
}

// TestWorkers: several workers sharing the tree prove the same optimum as one, on problems of tens to hundreds of
// nodes (CBC agrees), and a node limit stops them all.
func TestWorkers(t *testing.T) {
	nodes, stopped := 0, 0
	for seed := uint64(0); seed < 10; seed++ {
		p := packing(seed, 30, 12)
		one, err := Solve(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		many, err := Solve(p, Options{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if one.Status != Optimal || many.Status != Optimal || math.Abs(one.Objective-many.Objective) > 1e-6 {
			t.Fatalf("seed %d: one worker %s %v, three %s %v", seed, one.Status, one.Objective, many.Status,
				many.Objective)
		}
		if v := p.Violation(many.X); v > 1e-6 {
			t.Fatalf("seed %d: three workers' solution violates the problem by %g", seed, v)
		}
		nodes += many.Nodes
		switch st, obj, err := SolveCBC(context.Background(), p); {
		case errors.Is(err, ErrNoCBC):
		case err != nil:
			t.Fatal(err)
		case st != Optimal || math.Abs(obj-one.Objective) > 1e-6:
			t.Fatalf("seed %d: CBC says %s %v, we %v", seed, st, obj, one.Objective)
		}
		const limit = 5
		limited, err := Solve(p, Options{Workers: 3, MaxNodes: limit})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case limited.Nodes > limit:
			t.Fatalf("seed %d: %d nodes with a limit of %d", seed, limited.Nodes, limit)
		case limited.Status == Limit:
			stopped++
			if limited.X != nil && limited.Bound < limited.Objective {
				t.Fatalf("seed %d: stopped at the limit with bound %v below the objective %v", seed, limited.Bound,
					limited.Objective)
			}
		case limited.Status != Optimal || math.Abs(limited.Objective-one.Objective) > 1e-6:
			t.Fatalf("seed %d: %s %v within the limit, want optimal %v", seed, limited.Status, limited.Objective,
				one.Objective)
		}
	}
	if nodes < 500 || stopped == 0 {
		t.Fatalf("%d nodes in all, %d searches stopped at the node limit: too few to have the workers share the tree",
			nodes, stopped)
	}
}

func TestSolveInfeasible(t *testing.T) {
	p := &Problem{}
	x := p.AddCol("x", 1, 0, 10, true, 0)
	// 2x = 3 has no integer solution.
	p.AddRow("odd", 3, 3, Term{x, 2})
	res, err := Solve(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Infeasible {
		t.Fatalf("status %s, want infeasible", res.Status)
	}
	if st, _, err := SolveCBC(context.Background(), p); err == nil && st != Infeasible {
		t.Fatalf("CBC says %s", st)
	}
}

func TestSolveNodeLimitReportsGap(t *testing.T) {
	p := knapsack(7, 12)
	res, err := Solve(p, Options{MaxNodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Limit {
		t.Fatalf("status %s after 2 nodes, want limit", res.Status)
	}
	if res.X != nil && (res.Bound < res.Objective || res.Gap <= 0) {
		t.Fatalf("bound %v, objective %v, gap %v", res.Bound, res.Objective, res.Gap)
	}
}

// pricedProblem is a MILP with integer capacities y and many continuous activities x that use them: maximise the
// activities' value, each activity consuming two of three resources bought with y. Activities can be listed up
// front, or generated by a pricer from the duals.
type pricedProblem struct {
	value []float64
	use   [][2]Term // per activity: two (resource row, amount)
}

func newPricedProblem(seed uint64, n int) *pricedProblem {
	r := rand.New(rand.NewPCG(seed, 7))
	pp := &pricedProblem{}
	for j := 0; j < n; j++ {
		a, b := r.IntN(3), r.IntN(3)
		if a == b {
			b = (a + 1) % 3
		}
		pp.value = append(pp.value, float64(1+r.IntN(30)))
		pp.use = append(pp.use, [2]Term{{a, float64(1 + r.IntN(5))}, {b, float64(1 + r.IntN(5))}})
	}
	return pp
}

// base is the problem without activities: rows 0-2 are the resources (activity use <= 4*y_k), row 3 the budget.
func (pp *pricedProblem) base() *Problem {
	p := &Problem{Sense: Maximize}
	for k := 0; k < 3; k++ {
		y := p.AddCol("y", -float64(2+k), 0, 5, true, 1)
		p.AddRow("resource", math.Inf(-1), 0, Term{y, -4})
	}
	p.AddRow("budget", math.Inf(-1), 7, Term{0, 1}, Term{1, 1}, Term{2, 1})
	return p
}

func (pp *pricedProblem) add(p *Problem, j int) {
	p.AddColumn("x", pp.value[j], 0, 3, []Term{pp.use[j][0], pp.use[j][1]})
}

// TestPricer: branch-and-price, generating activities from the duals, finds the optimum of the problem with every
// activity listed, and adds only some of them.
func TestPricer(t *testing.T) {
	total := 0
	defer func() { t.Logf("%d of %d columns generated", total, 30*40) }()
	for seed := uint64(0); seed < 30; seed++ {
		pp := newPricedProblem(seed, 40)
		full := pp.base()
		for j := range pp.value {
			pp.add(full, j)
		}
		want, err := Solve(full, Options{})
		if err != nil || want.Status != Optimal {
			t.Fatalf("seed %d: full problem: %v %v", seed, want.Status, err)
		}
		priced := pp.base()
		added := map[int]bool{}
		// One column per round, the most negative: several rounds per node, each re-solving with a new column.
		pricer := func(duals, x []float64) (int, bool) {
			best, bestRC := -1, -1e-9
			for j := range pp.value {
				rc := -pp.value[j] - duals[pp.use[j][0].Col]*pp.use[j][0].Coef - duals[pp.use[j][1].Col]*pp.use[j][1].Coef
				if !added[j] && rc < bestRC {
					best, bestRC = j, rc
				}
			}
			if best < 0 {
				return 0, false
			}
			added[best] = true
			pp.add(priced, best)
			return 1, false
		}
		got, err := Solve(priced, Options{Pricer: pricer})
		if err != nil || got.Status != Optimal {
			t.Fatalf("seed %d: priced: %v %v", seed, got.Status, err)
		}
		if math.Abs(got.Objective-want.Objective) > 1e-6 {
			t.Errorf("seed %d: priced optimum %v, full %v (%d of %d columns added)", seed, got.Objective, want.Objective,
				len(added), len(pp.value))
		}
		if len(added) == 0 {
			t.Errorf("seed %d: the pricer added no column", seed)
		}
		total += len(added)
		if priced.Violation(got.X) > 1e-6 {
			t.Errorf("seed %d: the priced solution breaks its problem", seed)
		}
	}
}

// A problem without its columns fixed at zero has the same optimum, and expand puts its point back in the
// original columns, zeros where the dropped ones were.
func TestWithoutZeroColumns(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		p := knapsack(seed, 8)
		for j := 0; j < p.NumCols(); j += 3 {
			p.Upper[j] = 0
		}
		small, expand := p.WithoutZeroColumns()
		if want := p.NumCols() - (p.NumCols()+2)/3; small.NumCols() != want {
			t.Fatalf("seed %d: %d columns kept, want %d", seed, small.NumCols(), want)
		}
		full, err := Solve(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Solve(small, Options{})
		if err != nil {
			t.Fatal(err)
		}
		x := expand(res.X)
		if math.Abs(res.Objective-full.Objective) > 1e-9 || p.Violation(x) > 1e-9 || math.Abs(p.Value(x)-full.Objective) > 1e-9 {
			t.Errorf("seed %d: restricted optimum %v (its point worth %v in p, violation %v), want %v", seed,
				res.Objective, p.Value(x), p.Violation(x), full.Objective)
		}
		for j := 0; j < p.NumCols(); j += 3 {
			if x[j] != 0 {
				t.Errorf("seed %d: dropped column %d is %v", seed, j, x[j])
			}
		}
	}
	if _, expand := knapsack(1, 3).WithoutZeroColumns(); expand(nil) != nil {
		t.Error("expand(nil) is not nil")
	}
	// A row of dropped columns only goes when zero meets it, and stays (infeasible) when it does not; a row left
	// with one column goes into its bounds.
	p := knapsack(1, 4)
	p.Upper[0], p.Upper[1] = 0, 0
	p.AddRow("met by zero", math.Inf(-1), 5, Term{0, 1}, Term{1, 1})
	p.AddRow("broken by zero", 1, math.Inf(1), Term{0, 1})
	p.AddRow("one column left", math.Inf(-1), 5, Term{1, 1}, Term{2, 2}) // x2 <= 2.5: an integer, at most 2
	small, _ := p.WithoutZeroColumns()
	if small.Upper[0] != 2 || small.Lower[0] != 0 {
		t.Errorf("the column a row is left with has bounds [%v, %v], want [0, 2]", small.Lower[0], small.Upper[0])
	}
	var names []string
	for _, r := range small.Rows {
		names = append(names, r.Name)
	}
	if want := []string{"w1", "w2", "broken by zero"}; !slices.Equal(names, want) {
		t.Errorf("rows kept %v, want %v", names, want)
	}
	if res, err := Solve(small, Options{}); err != nil || res.Status != Infeasible {
		t.Errorf("with a row zero breaks: %v %v, want infeasible", res.Status, err)
	}
}
