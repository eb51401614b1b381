// Package milp solves small mixed-integer linear programs exactly, by branch-and-bound over LP relaxations solved
// with Clp (github.com/lanl/clp). It is generic; the allocation model of pkg/allocate gives it problem-specific
// help through Options: a first incumbent, branching priorities and columns generated on demand (branch-and-price).
package milp

import (
	"errors"
	"fmt"
	"math"
)

// Sense is the direction of optimisation.
type Sense int

// Senses.
const (
	Minimize Sense = iota
	Maximize
)

// Inf is an infinite bound.
var Inf = math.Inf(1)

// Term is one coefficient of a row.
type Term struct {
	Col  int
	Coef float64
}

// Row is a linear constraint Lo <= sum(Coef*x[Col]) <= Hi (either bound may be infinite).
type Row struct {
	Name   string
	Terms  []Term
	Lo, Hi float64
}

// Problem is a MILP. Columns are indexed 0..len(Obj)-1.
type Problem struct {
	Sense Sense
	// Obj, Lower, Upper, Integer and Names have one entry per column.
	Obj          []float64
	Lower, Upper []float64
	Integer      []bool
	Names        []string
	// Priority orders branching: among fractional integer columns, those of the highest priority are branched on
	// first (e.g. batch choices before replica counts).
	Priority []int
	Rows     []Row
}

// AddCol appends a column and returns its index.
func (p *Problem) AddCol(name string, obj, lo, hi float64, integer bool, priority int) int {
	p.Names = append(p.Names, name)
	p.Obj = append(p.Obj, obj)
	p.Lower = append(p.Lower, lo)
	p.Upper = append(p.Upper, hi)
	p.Integer = append(p.Integer, integer)
	p.Priority = append(p.Priority, priority)
	return len(p.Obj) - 1
}

// AddRow appends a row and returns its index. Terms with a zero coefficient are left out.
func (p *Problem) AddRow(name string, lo, hi float64, terms ...Term) int {
	kept := terms[:0:0]
	for _, t := range terms {
		if t.Coef != 0 {
			kept = append(kept, t)
		}
	}
	p.Rows = append(p.Rows, Row{Name: name, Terms: kept, Lo: lo, Hi: hi})
	return len(p.Rows) - 1
}

// AddColumn appends a continuous column with its coefficients in existing rows (row index -> coefficient), for
// columns generated while solving (Options.Pricer), and returns its index.
func (p *Problem) AddColumn(name string, obj, lo, hi float64, coefs []Term) int {
	j := p.AddCol(name, obj, lo, hi, false, 0)
	for _, c := range coefs {
		if c.Coef != 0 {
			p.Rows[c.Col].Terms = append(p.Rows[c.Col].Terms, Term{Col: j, Coef: c.Coef})
		}
	}
	return j
}

// NumCols is the number of columns.
func (p *Problem) NumCols() int { return len(p.Obj) }

// Validate checks the problem's shape.
func (p *Problem) Validate() error {
	n := len(p.Obj)
	if len(p.Lower) != n || len(p.Upper) != n || len(p.Integer) != n || len(p.Names) != n || len(p.Priority) != n {
		return errors.New("milp: column arrays differ in length")
	}
	for j := 0; j < n; j++ {
		if p.Lower[j] > p.Upper[j] {
			return fmt.Errorf("milp: column %s: lower bound %g above upper bound %g", p.Names[j], p.Lower[j], p.Upper[j])
		}
	}
	for i, r := range p.Rows {
		for _, t := range r.Terms {
			if t.Col < 0 || t.Col >= n {
				return fmt.Errorf("milp: row %d (%s) names column %d of %d", i, r.Name, t.Col, n)
			}
		}
	}
	return nil
}

// pad extends x with zeros to the problem's columns.
func (p *Problem) pad(x []float64) []float64 {
	if len(x) < p.NumCols() {
		x = append(append(make([]float64, 0, p.NumCols()), x...), make([]float64, p.NumCols()-len(x))...)
	}
	return x
}

// Value is the objective value of x (zeros in the columns it lacks).
func (p *Problem) Value(x []float64) float64 {
	x = p.pad(x)
	v := 0.0
	for j, c := range p.Obj {
		v += c * x[j]
	}
	return v
}

// Violation is the largest amount by which x breaks a row or a bound, or is fractional in an integer column. A
// shorter x (from before columns were added) has zeros in the new columns.
func (p *Problem) Violation(x []float64) float64 {
	x = p.pad(x)
	worst := 0.0
	for j := range p.Obj {
		worst = max(worst, p.Lower[j]-x[j], x[j]-p.Upper[j])
		if p.Integer[j] {
			worst = max(worst, math.Abs(x[j]-math.Round(x[j])))
		}
	}
	for _, r := range p.Rows {
		s := 0.0
		for _, t := range r.Terms {
			s += t.Coef * x[t.Col]
		}
		worst = max(worst, r.Lo-s, s-r.Hi)
	}
	return worst
}

// WithoutZeroColumns is p without its columns fixed at zero (both bounds 0), which add nothing to any row, and
// without the rows left empty that zero meets; a row left with one column becomes that column's bounds. A problem
// restricted by fixing most columns at zero (a heuristic's sub-problem) then solves as the small problem it is:
// each LP's work grows with the rows too, and a restricted problem of the classed traffic example at 1400 QPS
// keeps 258 of its 694 rows. expand maps a point of the smaller problem back to p's columns, zeros in the dropped
// ones.
func (p *Problem) WithoutZeroColumns() (small *Problem, expand func(x []float64) []float64) {
	keep := make([]int, 0, p.NumCols()) // p's column of each column of small
	index := make([]int, p.NumCols())   // small's column of each column of p, -1 when dropped
	for j := range p.Obj {
		index[j] = -1
		if p.Lower[j] != 0 || p.Upper[j] != 0 {
			index[j] = len(keep)
			keep = append(keep, j)
		}
	}
	small = &Problem{Sense: p.Sense}
	for _, j := range keep {
		small.AddCol(p.Names[j], p.Obj[j], p.Lower[j], p.Upper[j], p.Integer[j], p.Priority[j])
	}
	small.Rows = make([]Row, 0, len(p.Rows))
	for _, r := range p.Rows {
		terms := make([]Term, 0, len(r.Terms))
		for _, t := range r.Terms {
			if k := index[t.Col]; k >= 0 {
				terms = append(terms, Term{Col: k, Coef: t.Coef})
			}
		}
		if len(terms) == 0 && r.Lo <= 0 && r.Hi >= 0 {
			continue // met by every point
		}
		if len(terms) == 1 && small.boundBy(terms[0], r.Lo, r.Hi) {
			continue
		}
		small.Rows = append(small.Rows, Row{Name: r.Name, Terms: terms, Lo: r.Lo, Hi: r.Hi})
	}
	expand = func(x []float64) []float64 {
		if x == nil {
			return nil
		}
		out := make([]float64, p.NumCols())
		for k, j := range keep {
			out[j] = x[k]
		}
		return out
	}
	return small, expand
}

// boundBy narrows the bounds of column t.Col to those the row lo <= t.Coef*x <= hi allows (to integers for an
// integer column) and says it did; false, the bounds unchanged, when none are left (the row then stays, and the LP
// finds the problem infeasible).
func (p *Problem) boundBy(t Term, lo, hi float64) bool {
	l, u := lo/t.Coef, hi/t.Coef
	if t.Coef < 0 {
		l, u = u, l
	}
	if p.Integer[t.Col] {
		l, u = math.Ceil(l-intTol), math.Floor(u+intTol)
	}
	l, u = max(l, p.Lower[t.Col]), min(u, p.Upper[t.Col])
	if l > u {
		return false
	}
	p.Lower[t.Col], p.Upper[t.Col] = l, u
	return true
}
