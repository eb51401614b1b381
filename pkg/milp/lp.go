package milp

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
	p       *Problem
	matrix  *clp.PackedMatrix
	rows    []clp.Bounds
	obj     []float64 // minimisation form
	simplex *clp.Simplex
	cols    []clp.Bounds
	solves  int
	iters   int // simplex iterations over every solve
}

func newRelaxation(p *Problem) *relaxation {
	n := p.NumCols()
	byCol := make([][]clp.Nonzero, n)
	for i, r := range p.Rows {
		for _, t := range r.Terms {
			byCol[t.Col] = append(byCol[t.Col], clp.Nonzero{Index: i, Value: t.Coef})
		}
	}
	m := clp.NewPackedMatrix()
	for _, col := range byCol {
		m.AppendColumn(col)
	}
	m.SetDimensions(len(p.Rows), n)
	rows := make([]clp.Bounds, len(p.Rows))
	for i, r := range p.Rows {
		rows[i] = clp.Bounds{Lower: r.Lo, Upper: r.Hi}
	}
	obj := make([]float64, n)
	for j, c := range p.Obj {
		if p.Sense == Maximize {
			c = -c
		}
		obj[j] = c
	}
	return &relaxation{p: p, matrix: m, rows: rows, obj: obj, cols: make([]clp.Bounds, n)}
}

// solve returns the status, the minimisation-form objective and the solution under bounds lo, up, starting from
// basis start when it is not nil (otherwise from the last solve's).
func (r *relaxation) solve(lo, up []float64, start []byte) (lpStatus, float64, []float64) {
	r.solves++
	if r.simplex == nil {
		for j := range r.cols {
			r.cols[j] = clp.Bounds{Lower: lo[j], Upper: up[j]}
		}
		r.simplex = clp.NewSimplex()
		quiet(r.simplex)
		r.simplex.LoadProblem(r.matrix, r.cols, r.obj, r.rows, nil)
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
	x := r.simplex.PrimalColumnSolution()
	return lpOptimal, r.simplex.ObjectiveValue(), x
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
