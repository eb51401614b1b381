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
			setBasis(r.simplex, r.widen(start))
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

// widen fits a basis saved before columns were added: the new columns start at their lower bound.
func (r *relaxation) widen(b []byte) []byte {
	rows, cols := len(r.rowLo), len(r.obj)
	if len(b) == rows+cols {
		return b
	}
	old := len(b) - rows
	out := make([]byte, 0, rows+cols)
	out = append(out, b[:old]...)
	for j := old; j < cols; j++ {
		out = append(out, atLowerBound)
	}
	return append(out, b[old:]...)
}

// addColumns loads the problem's columns from index from on into the LP, keeping its basis.
func (r *relaxation) addColumns(from int) {
	p := r.p
	n := p.NumCols() - from
	if n <= 0 {
		return
	}
	if r.simplex == nil { // nothing loaded yet: the first solve loads every column
		fresh := newRelaxation(p)
		r.matrix, r.obj = fresh.matrix, fresh.obj
		return
	}
	byCol := make([][]Term, n)
	for i, row := range p.Rows {
		for _, t := range row.Terms {
			if t.Col >= from {
				byCol[t.Col-from] = append(byCol[t.Col-from], Term{Col: i, Coef: t.Coef})
			}
		}
	}
	a := &columnMatrix{start: make([]C.int, n+1)}
	for k, terms := range byCol {
		for _, t := range terms {
			a.index = append(a.index, C.int(t.Col))
			a.value = append(a.value, t.Coef)
		}
		a.start[k+1] = C.int(len(a.index))
	}
	obj := make([]float64, n)
	for k := range obj {
		obj[k] = p.Obj[from+k]
		if p.Sense == Maximize {
			obj[k] = -obj[k]
		}
	}
	r.obj = append(r.obj, obj...)
	addColumns(r.simplex, a, p.Lower[from:], p.Upper[from:], obj)
}

// duals is the row duals of the last solve (minimisation form: reduced cost = cost - duals . column).
func (r *relaxation) duals() []float64 { return rowDuals(r.simplex, len(r.rowLo)) }

// Relax solves the LP relaxation of p under its own bounds, generating columns with pricer (nil: none) as Solve
// does: the solution and its objective value, or ok false when the relaxation is infeasible or Clp cannot solve it.
// Heuristics start from it.
func Relax(p *Problem, pricer func(duals, x []float64) (int, bool)) (x []float64, obj float64, ok bool) {
	if p.Validate() != nil {
		return nil, 0, false
	}
	r := newRelaxation(p)
	st, v, x := r.solve(p.Lower, p.Upper, nil)
	for st == lpOptimal && pricer != nil {
		before := p.NumCols()
		added, infeasible := pricer(r.duals(), x)
		if infeasible {
			return nil, 0, false
		}
		if added == 0 {
			break
		}
		r.addColumns(before)
		st, v, x = r.solve(p.Lower, p.Upper, nil)
	}
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
