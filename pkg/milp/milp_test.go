package milp

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
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

func TestSolveMatchesBruteForceAndCBC(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		p := knapsack(seed, 6)
		res, err := Solve(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		want, ok := bruteForce(p)
		if !ok || res.Status != Optimal {
			t.Fatalf("seed %d: status %s, brute force found %v", seed, res.Status, ok)
		}
		if math.Abs(res.Objective-want) > 1e-6 {
			t.Fatalf("seed %d: objective %v, brute force %v", seed, res.Objective, want)
		}
		if v := p.Violation(res.X); v > 1e-6 {
			t.Fatalf("seed %d: solution violates the problem by %g", seed, v)
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

// TestLazyBranching: x + y <= 2 with a lazy rule "x and y are not both 1"; max x + y must be 1.
func TestLazyBranching(t *testing.T) {
	p := &Problem{Sense: Maximize}
	x := p.AddCol("x", 1, 0, 1, true, 0)
	y := p.AddCol("y", 1, 0, 1, true, 0)
	p.AddRow("sum", math.Inf(-1), 2, Term{x, 1}, Term{y, 1})
	res, err := Solve(p, Options{
		Lazy: func(v, lo, up []float64) int {
			if v[x] > 0.5 && v[y] > 0.5 {
				if lo[x] != up[x] {
					return x
				}
				return y
			}
			return -1
		},
		Propagate: func(lo, up []float64) bool {
			if lo[x] == 1 && lo[y] == 1 {
				return false
			}
			return true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Optimal || res.Objective != 1 {
		t.Fatalf("%s %v, want optimal 1", res.Status, res.Objective)
	}
}
