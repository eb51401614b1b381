package milp

// #include <stdlib.h>
import "C"

import (
	"math"

	"github.com/lanl/clp"
)

// lpStatus is the outcome of one LP relaxation.
type lpStatus int

const (
	lpOptimal lpStatus = iota
	lpInfeasible
	lpFailed // unbounded, or Clp gave up
)

// relaxation solves the LP relaxation of a problem under changing column bounds. The constraint matrix is packed
// once; each solve loads it with the node's bounds into one Clp model, which keeps its last basis as the starting
// point of the next dual simplex solve.
type relaxation struct {
	p            *Problem
	matrix       *columnMatrix
	rowLo, rowHi []float64
	obj          []float64 // minimisation form
	simplex      *clp.Simplex
	solves       int
	iters        int // simplex iterations over every solve
}

func newRelaxation(p *Problem) *relaxation {
	n := p.NumCols()
	count := make([]int, n+1)
	for _, r := range p.Rows {
		for _, t := range r.Terms {
			count[t.Col+1]++
		}
	}
	a := &columnMatrix{start: make([]C.int, n+1)}
	for j := 0; j < n; j++ {
		count[j+1] += count[j]
		a.start[j+1] = C.int(count[j+1])
	}
	a.index = make([]C.int, count[n])
	a.value = make([]float64, count[n])
	next := count[:n]
	for i, r := range p.Rows {
		for _, t := range r.Terms {
			a.index[next[t.Col]], a.value[next[t.Col]] = C.int(i), t.Coef
			next[t.Col]++
		}
	}
	rowLo, rowHi := make([]float64, len(p.Rows)), make([]float64, len(p.Rows))
	for i, r := range p.Rows {
		rowLo[i], rowHi[i] = r.Lo, r.Hi
	}
	obj := make([]float64, n)
	for j, c := range p.Obj {
		if p.Sense == Maximize {
			c = -c
		}
		obj[j] = c
	}
	return &relaxation{p: p, matrix: a, rowLo: rowLo, rowHi: rowHi, obj: obj}
}

// solve returns the status, the minimisation-form objective and the solution under bounds lo, up, starting from
// basis start when it is not nil (otherwise from the last solve's).
func (r *relaxation) solve(lo, up []float64, start []byte) (lpStatus, float64, []float64) {
	r.solves++
	if r.simplex == nil {
		r.simplex = clp.NewSimplex()
		quiet(r.simplex)
		load(r.simplex, r.matrix, lo, up, r.obj, r.rowLo, r.rowHi)
		r.simplex.SetOptimizationDirection(clp.Minimize)
	} else {
		setColumnBounds(r.simplex, lo, up)
		if start != nil {
			setBasis(r.simplex, start)
		}
	}
	// Keep Clp's work areas and factorization between solves, and skip what the bound changes leave valid
	// (clpwarm.cpp tells it which bounds and basis changed).
	switch r.simplex.Dual(clp.NoValuesPass, clp.KeepWorkAreas|clp.OldFactorization|clp.ReduceInitialization) {
	case clp.Optimal:
	case clp.Infeasible:
		return lpInfeasible, math.Inf(1), nil
	default:
		return lpFailed, math.Inf(1), nil
	}
	r.iters += iterations(r.simplex)
	return lpOptimal, r.simplex.ObjectiveValue(), primal(r.simplex, len(r.obj))
}

// Relax solves the LP relaxation of p under its own bounds: the solution and its objective value, or ok false when
// the relaxation is infeasible or Clp cannot solve it. Heuristics start from it.
func Relax(p *Problem) (x []float64, obj float64, ok bool) {
	if p.Validate() != nil {
		return nil, 0, false
	}
	st, v, x := newRelaxation(p).solve(p.Lower, p.Upper, nil)
	if st != lpOptimal {
		return nil, 0, false
	}
	if p.Sense == Maximize {
		v = -v
	}
	return x, v, true
}

// basis is the basis of the last solve, for the children of the node it solved.
func (r *relaxation) basis() []byte {
	if r.simplex == nil {
		return nil
	}
	return basis(r.simplex)
}
