package milp

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPropagate(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		name           string
		lo, up         []float64
		rows           []Row
		feasible       bool
		wantLo, wantUp []float64
	}{
		{"the other column's lower bound caps one", []float64{2, 0}, []float64{5, 5},
			[]Row{{Terms: []Term{{0, 1}, {1, 1}}, Lo: -inf, Hi: 3}}, true, []float64{2, 0}, []float64{3, 1}},
		{"a greater-than row that cannot be met", []float64{0, 0}, []float64{2, 2},
			[]Row{{Terms: []Term{{0, 1}, {1, 1}}, Lo: 5, Hi: inf}}, false, nil, nil},
		{"negative coefficients", []float64{0, 0}, []float64{5, 3},
			[]Row{{Terms: []Term{{0, 1}, {1, -1}}, Lo: -inf, Hi: -1}}, true, []float64{0, 1}, []float64{2, 3}},
		{"an equality, rounded to whole numbers", []float64{0, 0}, []float64{10, 10},
			[]Row{{Terms: []Term{{0, 2}, {1, 3}}, Lo: 12, Hi: 12}}, true, []float64{0, 0}, []float64{6, 4}},
		{"an infinite bound bounded by the row", []float64{0, 1}, []float64{inf, 2},
			[]Row{{Terms: []Term{{0, 1}, {1, 1}}, Lo: -inf, Hi: 4}}, true, []float64{0, 1}, []float64{3, 2}},
		{"through two rows", []float64{0, 0, 0}, []float64{9, 9, 9},
			[]Row{{Terms: []Term{{0, 1}, {1, -1}}, Lo: 0, Hi: 0}, {Terms: []Term{{1, 1}, {2, 1}}, Lo: 7, Hi: 7},
				{Terms: []Term{{2, 1}}, Lo: 5, Hi: inf}}, true, []float64{0, 0, 5}, []float64{2, 2, 7}},
	} {
		p := &Problem{}
		for range c.lo {
			p.AddCol("x", 0, 0, 0, true, 0)
		}
		p.Rows = c.rows
		lo, up := slices.Clone(c.lo), slices.Clone(c.up)
		ok := p.propagate(p.integerRows(), lo, up)
		if ok != c.feasible {
			t.Errorf("%s: feasible %v, want %v", c.name, ok, c.feasible)
			continue
		}
		if ok && (!slices.Equal(lo, c.wantLo) || !slices.Equal(up, c.wantUp)) {
			t.Errorf("%s: bounds %v..%v, want %v..%v", c.name, lo, up, c.wantLo, c.wantUp)
		}
	}
}

// TestPropagateKeepsEveryPoint: on random knapsacks under random node bounds, propagation never cuts off a feasible
// integer point, and says a node is infeasible only when it has none; and it tightens some.
func TestPropagateKeepsEveryPoint(t *testing.T) {
	tightened, infeasible := 0, 0
	for seed := uint64(0); seed < 200; seed++ {
		p := knapsack(seed, 5)
		r := rand.New(rand.NewPCG(seed, 3))
		for j := range p.NumCols() { // a node's bounds
			p.Lower[j] = float64(r.IntN(3) / 2) // 0 or 1
			p.Upper[j] = p.Lower[j] + float64(r.IntN(3))
		}
		p.Rows = append(p.Rows, Row{Terms: []Term{{0, 1}, {1, 1}, {2, 1}}, Lo: float64(r.IntN(6)), Hi: math.Inf(1)})
		lo, up := slices.Clone(p.Lower), slices.Clone(p.Upper)
		ok := p.propagate(p.integerRows(), lo, up)
		_, any := bruteForce(p)
		if !ok {
			infeasible++
			if any {
				t.Fatalf("seed %d: propagation says infeasible, but the node has a point", seed)
			}
			continue
		}
		if !slices.Equal(lo, p.Lower) || !slices.Equal(up, p.Upper) {
			tightened++
		}
		// Every feasible point lies within the propagated bounds.
		x := make([]float64, p.NumCols())
		var rec func(j int)
		rec = func(j int) {
			if j == len(x) {
				if p.Violation(x) <= 1e-9 {
					for k, v := range x {
						if v < lo[k] || v > up[k] {
							t.Fatalf("seed %d: feasible point %v outside the propagated bounds %v..%v", seed, x, lo, up)
						}
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
	}
	if tightened == 0 || infeasible == 0 {
		t.Fatalf("%d nodes tightened, %d found infeasible: want both", tightened, infeasible)
	}
	t.Logf("%d of 200 nodes tightened, %d found infeasible", tightened, infeasible)
}
