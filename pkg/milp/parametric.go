package milp

import "math"

// ParametricLP is a problem's LP relaxation solved again and again with one column fixed at changing values, each
// solve from the last one's basis (a few dual simplex pivots): the relaxation's optimum as a function of that
// column, concave when maximising (convex when minimising), so that each value and slope bounds it everywhere. For
// an upper bound on a MILP's optimum as a function of a resource's amount (pkg/allocate's decomposition of a joint
// plan over its servers) without branch-and-bound.
type ParametricLP struct {
	r      *relaxation
	col    int
	lo, up []float64
	sign   float64 // 1 when minimising, -1 when maximising: the relaxation works in minimisation form
}

// NewParametricLP is p's LP relaxation parametrised by column col. p must not change while it is in use.
func NewParametricLP(p *Problem, col int) (*ParametricLP, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	sign := 1.0
	if p.Sense == Maximize {
		sign = -1
	}
	return &ParametricLP{r: newRelaxation(p), col: col, lo: append([]float64(nil), p.Lower...),
		up: append([]float64(nil), p.Upper...), sign: sign}, nil
}

// At solves the relaxation with the column fixed at v. feasible is false when the relaxation has no point there
// (the values with one are an interval); value is its optimum and slope
// the optimum's rate of change in v there (the column's reduced cost: a supergradient when maximising, a
// subgradient when minimising), both in the problem's sense. ok is false when Clp could not solve it.
func (l *ParametricLP) At(v float64) (ok, feasible bool, value, slope float64) {
	l.lo[l.col], l.up[l.col] = v, v
	st, obj, _ := l.r.solve(l.lo, l.up, nil)
	switch st {
	case lpInfeasible:
		return true, false, math.NaN(), math.NaN()
	case lpFailed:
		return false, false, math.NaN(), math.NaN()
	}
	return true, true, l.sign * obj, l.sign * l.r.reducedCosts()[l.col]
}
