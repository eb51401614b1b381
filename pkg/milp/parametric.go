package milp

import (
	"fmt"
	"math"
	"slices"
)

// ParametricLP is a problem's LP relaxation solved again and again with one column fixed at changing values, each
// solve from the last one's basis (a few dual simplex pivots): the relaxation's optimum as a function of that
// column, concave when maximising (convex when minimising), so that each value and slope bounds it everywhere. For
// an upper bound on a MILP's optimum as a function of a resource's amount (pkg/allocate's decomposition of a joint
// plan over its servers) without branch-and-bound.
type ParametricLP struct {
	r      *relaxation
	cols   []int
	lo, up []float64
	sign   float64 // 1 when minimising, -1 when maximising: the relaxation works in minimisation form
}

// NewParametricLP is p's LP relaxation parametrised by column col. p must not change while it is in use.
func NewParametricLP(p *Problem, col int) (*ParametricLP, error) { return NewParametricLPOver(p, col) }

// NewParametricLPOver is p's LP relaxation parametrised by several columns at once (AtPoint): jointly concave in
// them when maximising, so that each value and gradient bounds it everywhere (a tangent plane).
func NewParametricLPOver(p *Problem, cols ...int) (*ParametricLP, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	sign := 1.0
	if p.Sense == Maximize {
		sign = -1
	}
	for _, c := range cols {
		if c < 0 || c >= p.NumCols() {
			return nil, fmt.Errorf("milp: parametric column %d of %d", c, p.NumCols())
		}
	}
	return &ParametricLP{r: newRelaxation(p), cols: slices.Clone(cols), lo: append([]float64(nil), p.Lower...),
		up: append([]float64(nil), p.Upper...), sign: sign}, nil
}

// At solves the relaxation with the column fixed at v. feasible is false when the relaxation has no point there
// (the values with one are an interval); value is its optimum and slope
// the optimum's rate of change in v there (the column's reduced cost: a supergradient when maximising, a
// subgradient when minimising), both in the problem's sense. ok is false when Clp could not solve it.
func (l *ParametricLP) At(v float64) (ok, feasible bool, value, slope float64) {
	ok, feasible, value, slopes := l.AtPoint([]float64{v})
	if !feasible {
		return ok, feasible, value, math.NaN()
	}
	return ok, feasible, value, slopes[0]
}

// AtPoint is At with each of the columns fixed at its value of vs: slopes are each column's reduced cost (together
// a supergradient when maximising, a subgradient when minimising).
func (l *ParametricLP) AtPoint(vs []float64) (ok, feasible bool, value float64, slopes []float64) {
	for i, c := range l.cols {
		l.lo[c], l.up[c] = vs[i], vs[i]
	}
	st, obj, _ := l.r.solve(l.lo, l.up, nil)
	switch st {
	case lpInfeasible:
		return true, false, math.NaN(), nil
	case lpFailed:
		return false, false, math.NaN(), nil
	}
	rc := l.r.reducedCosts()
	slopes = make([]float64, len(l.cols))
	for i, c := range l.cols {
		slopes[i] = l.sign * rc[c]
	}
	return true, true, l.sign * obj, slopes
}

// Basis is the optimal basis of the last solve (nil: none), for a branch-and-bound's root at the same column bounds
// (Options.RootBasis).
func (l *ParametricLP) Basis() []byte { return l.r.basis() }
