package milp

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

// relaxation solves the LP relaxation of a problem under changing column bounds in one Clp model, loaded at the
// first solve; each later solve sets the node's bounds and starts from a given basis or the last solve's.
type relaxation struct {
	p            *Problem
	matrix       *columnMatrix
	rowLo, rowHi []float64
	obj          []float64 // minimisation form
	simplex      *clp.Simplex
	solves       int
}

func newRelaxation(p *Problem) *relaxation {
	rowLo, rowHi := make([]float64, len(p.Rows)), make([]float64, len(p.Rows))
	for i, r := range p.Rows {
		rowLo[i], rowHi[i] = r.Lo, r.Hi
	}
	return &relaxation{p: p, matrix: columnsOf(p, 0), rowLo: rowLo, rowHi: rowHi, obj: minObjective(p, 0)}
}

// columnsOf is the constraint matrix of p's columns from index from on, in compressed sparse column form.
func columnsOf(p *Problem, from int) *columnMatrix {
	n := p.NumCols() - from
	count := make([]int, n+1)
	for _, r := range p.Rows {
		for _, t := range r.Terms {
			if t.Col >= from {
				count[t.Col-from+1]++
			}
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
			if j := t.Col - from; j >= 0 {
				a.index[next[j]], a.value[next[j]] = C.int(i), t.Coef
				next[j]++
			}
		}
	}
	return a
}

// minObjective is the objective of p's columns from index from on, in minimisation form.
func minObjective(p *Problem, from int) []float64 {
	obj := append([]float64(nil), p.Obj[from:]...)
	if p.Sense == Maximize {
		for j := range obj {
			obj[j] = -obj[j]
		}
	}
	return obj
}

// solve returns the status, the minimisation-form objective and the solution under bounds lo, up, starting from
// basis start when it is not nil (otherwise from the last solve's).
func (r *relaxation) solve(lo, up []float64, start []byte) (lpStatus, float64, []float64) {
	switch r.dual(lo, up, start) {
	case clp.Optimal:
	case clp.Infeasible:
		return lpInfeasible, math.Inf(1), nil
	default:
		return lpFailed, math.Inf(1), nil
	}
	return lpOptimal, r.simplex.ObjectiveValue(), primal(r.simplex, len(r.obj))
}

// estimate is solve stopped after maxIter dual simplex iterations, without the solution: the status (lpOptimal
// also when stopped at the limit), the objective reached, and whether the LP finished. Only after a solve, which
// loads the model.
func (r *relaxation) estimate(lo, up []float64, start []byte, maxIter int) (lpStatus, float64, bool) {
	keep := r.simplex.MaxIterations()
	r.simplex.SetMaxIterations(maxIter)
	defer r.simplex.SetMaxIterations(keep)
	switch r.dual(lo, up, start) {
	case clp.Optimal:
		return lpOptimal, r.simplex.ObjectiveValue(), true
	case clpStopped:
		return lpOptimal, r.simplex.ObjectiveValue(), false
	case clp.Infeasible:
		return lpInfeasible, math.Inf(1), true
	}
	return lpFailed, math.Inf(1), false
}

// dual runs Clp's dual simplex under bounds lo, up from basis start (the last solve's when nil), loading the model
// at the first call.
func (r *relaxation) dual(lo, up []float64, start []byte) clp.SimplexStatus {
	r.solves++
	if r.simplex == nil {
		r.simplex = clp.NewSimplex()
		quiet(r.simplex)
		load(r.simplex, r.matrix, lo, up, r.obj, r.rowLo, r.rowHi)
		r.simplex.SetOptimizationDirection(clp.Minimize)
		if start != nil { // a worker's first node, deep in the tree: from its parent's basis too
			setBasis(r.simplex, r.widen(start))
		}
	} else {
		setColumnBounds(r.simplex, lo, up)
		if start != nil {
			setBasis(r.simplex, r.widen(start))
		}
	}
	// Keep Clp's work areas and factorization between solves, and skip what the bound changes leave valid
	// (clpwarm.cpp tells it which bounds and basis changed).
	return r.simplex.Dual(clp.NoValuesPass, clp.KeepWorkAreas|clp.OldFactorization|clp.ReduceInitialization)
}

// clpStopped is Clp's status of a solve stopped at its iteration or time limit.
const clpStopped = 3

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
	if r.simplex == nil { // nothing loaded yet: the first solve loads every column
		r.matrix, r.obj = columnsOf(r.p, 0), minObjective(r.p, 0)
		return
	}
	if from >= r.p.NumCols() {
		return
	}
	obj := minObjective(r.p, from)
	r.obj = append(r.obj, obj...)
	addColumns(r.simplex, columnsOf(r.p, from), r.p.Lower[from:], r.p.Upper[from:], obj)
}

// solvePriced solves the LP from basis start and, with a pricer, adds the columns it makes and solves again until
// it makes none. bounds gives the column bounds, again after columns are added. A pricer that finds the LP has no
// point makes it lpInfeasible.
func (r *relaxation) solvePriced(bounds func() (lo, up []float64), start []byte,
	pricer func(duals, x []float64) (int, bool)) (lpStatus, float64, []float64) {
	lo, up := bounds()
	st, obj, x := r.solve(lo, up, start)
	for st == lpOptimal && pricer != nil {
		before := r.p.NumCols()
		added, infeasible := pricer(r.duals(), x)
		if infeasible {
			return lpInfeasible, math.Inf(1), nil
		}
		if added == 0 {
			break
		}
		r.addColumns(before)
		lo, up = bounds()
		st, obj, x = r.solve(lo, up, nil)
	}
	return st, obj, x
}

// duals is the row duals of the last solve (minimisation form: reduced cost = cost - duals . column).
func (r *relaxation) duals() []float64 { return rowDuals(r.simplex, len(r.rowLo)) }

// reducedCosts is the column reduced costs of the last solve (minimisation form).
func (r *relaxation) reducedCosts() []float64 { return reducedCosts(r.simplex, len(r.obj)) }

// basis is the basis of the last solve, for the children of the node it solved.
func (r *relaxation) basis() []byte {
	if r.simplex == nil {
		return nil
	}
	return basis(r.simplex)
}
