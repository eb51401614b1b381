// A pipeline's best objective as a function of its servers, f(n), as the decomposition of a joint plan knows it:
// points found and bounds proven by branch-and-bound at some n, the LP relaxation's values and slopes at others.

package allocate

import (
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// serversFunc is f(n) of the pipelines whose accuracy-step models are one problem (copies of one spec at one
// demand share theirs): what is known of it so far.
type serversFunc struct {
	m *model
	// prob is m's problem with its servers row bounded by column given (fixed at n by its bounds) instead of a
	// number: the relaxation and the searches set n there.
	prob  *milp.Problem
	given int
	lp    *milp.ParametricLP
	// lps is the relaxation's value and slope at the n where it was solved; lpNone the most servers at which it
	// was found to have no point (-1: none known). The relaxation's value is concave in n, so each value and slope
	// bounds f everywhere (a tangent).
	lps    map[int]lpPoint
	lpNone int
	// evals is what branch-and-bound found at the n where it ran.
	evals map[int]*evaluation
}

type lpPoint struct{ value, slope float64 }

// evaluation is one branch-and-bound of f(n): its best point x (nil: none) of value lo (-inf without), up a bound on
// f(n) (-inf when it proved there is no point), and the relative gap it was run to.
type evaluation struct {
	x      []float64
	lo, up float64
	gap    float64
}

// newServersFunc is m's serversFunc, with its relaxation solved at n = all, the cluster's servers; nil when the
// relaxation has no point there or Clp fails: no plan serves the pipeline's demand, or this decomposition cannot
// tell.
func newServersFunc(m *model, all int) *serversFunc {
	q := *m.prob
	q.Obj = slices.Clone(q.Obj)
	q.Lower, q.Upper = slices.Clone(q.Lower), slices.Clone(q.Upper)
	q.Integer, q.Names, q.Priority = slices.Clone(q.Integer), slices.Clone(q.Names), slices.Clone(q.Priority)
	q.Rows = slices.Clone(q.Rows)
	given := q.AddCol("servers given", 0, 0, 0, true, 0)
	rows := 0
	for i, r := range q.Rows {
		if _, ok := classOfServersRow(r.Name); ok {
			q.Rows[i].Terms = append(slices.Clone(r.Terms), milp.Term{Col: given, Coef: -1})
			q.Rows[i].Lo, q.Rows[i].Hi = math.Inf(-1), 0
			rows++
		}
	}
	if rows != 1 {
		return nil
	}
	lp, err := milp.NewParametricLP(&q, given)
	if err != nil {
		return nil
	}
	f := &serversFunc{m: m, prob: &q, given: given, lp: lp, lps: map[int]lpPoint{}, lpNone: -1,
		evals: map[int]*evaluation{}}
	if !f.relax(all) || f.lpNone == all {
		return nil
	}
	return f
}

// relax solves the relaxation at n servers (false: Clp failed).
func (f *serversFunc) relax(n int) bool {
	ok, feasible, value, slope := f.lp.At(float64(n))
	switch {
	case !ok:
		return false
	case !feasible:
		f.lpNone = max(f.lpNone, n) // more servers never hurt: none at fewer either
	default:
		f.lps[n] = lpPoint{value, max(slope, 0)}
	}
	return true
}

// lpSlack is added to a bound read from the relaxation: Clp's values are exact to its tolerances only.
const lpSlack = 1e-9

// bounds is what is known of f at 0..all servers: up[n] >= f(n) (-inf: no point), lo[n] the best point's value
// found at some n' <= n (a plan on fewer servers fits on more), from[n] that n' (-1: none; lo[n] is -inf).
func (f *serversFunc) bounds(all int) (up, lo []float64, from []int) {
	up, lo, from = make([]float64, all+1), make([]float64, all+1), make([]int, all+1)
	top := f.lps[all].value + lpSlack
	for n := range up {
		up[n] = top
		if n <= f.lpNone {
			up[n] = math.Inf(-1)
			continue
		}
		for at, p := range f.lps {
			up[n] = min(up[n], p.value+p.slope*float64(n-at)+lpSlack)
		}
	}
	cut := math.Inf(1) // f is non-decreasing: a bound at n bounds it below n too
	for n := all; n >= 0; n-- {
		if e := f.evals[n]; e != nil {
			cut = min(cut, e.up)
		}
		up[n] = min(up[n], cut)
	}
	best, at := math.Inf(-1), -1
	for n := range lo {
		if e := f.evals[n]; e != nil && e.x != nil && e.lo > best {
			best, at = e.lo, n
		}
		lo[n], from[n] = best, at
	}
	return up, lo, from
}

// exact says f's bound at n is the relaxation's own there or branch-and-bound's, not a tangent's from elsewhere.
func (f *serversFunc) exact(n int) bool {
	_, lp := f.lps[n]
	return lp || f.evals[n] != nil || n <= f.lpNone
}

// evaluate runs branch-and-bound on f(n) to relative gap gap, from the best point known at fewer servers, with opt's
// node limit, time limit limit and first-point grace grace, on workers workers, its open nodes within store bytes.
// It returns the nodes it explored.
func (f *serversFunc) evaluate(n int, gap float64, limit, grace time.Duration, workers int, store int64,
	opt Options) int {
	q := *f.prob
	q.Lower, q.Upper = slices.Clone(q.Lower), slices.Clone(q.Upper)
	q.Lower[f.given], q.Upper[f.given] = float64(n), float64(n)
	_, lo, from := f.bounds(n)
	var incumbent []float64
	if from[n] >= 0 {
		incumbent = slices.Clone(f.evals[from[n]].x)
		incumbent[f.given] = float64(n)
	}
	e, nodes := searchFixed(f.m, &q, incumbent, lo[n], nil, nil, f.evals[n], gap, limit, grace, workers, store, opt)
	f.evals[n] = e
	return nodes
}

// searchFixed runs branch-and-bound on q, a function's problem with its servers given (fixed by q's bounds), to
// relative gap gap, from incumbent (nil: none) of value lo, with opt's node limit, time limit limit and first-point
// grace grace, on workers workers, its open nodes within store bytes. seed (nil: none) is a point found elsewhere
// whose batch sizes are tried first (the restricted MILP at this point's servers, from its replica counts where
// they fit), within the limit; basis (nil: none) is the
// relaxation's optimal basis at q's bounds, where the root's LP starts. It returns what is known at that point after
// it, prev (nil: nothing) and the search together, and the nodes it explored.
func searchFixed(m *model, q *milp.Problem, incumbent []float64, lo float64, seed []float64, basis []byte,
	prev *evaluation, gap float64, limit, grace time.Duration, workers int, store int64, opt Options) (*evaluation,
	int) {
	began := time.Now()
	sub := opt
	sub.TimeLimit = limit
	tried := &triedBatches{}
	restricted := func(x []float64, best float64) []float64 {
		fixed := m.fixedBatches(x)
		if !tried.first(fixed) {
			return nil
		}
		r := *q
		r.Lower, r.Upper = slices.Clone(q.Lower), slices.Clone(q.Upper)
		m.restrictToBatches(fixed, r.Lower, r.Upper)
		return solveRestricted(&r, best, sub)
	}
	if seed != nil {
		// The seed's own replica counts, its flows solved again here, are a first point of its restricted MILP
		// when they fit (a copy's at a lower demand, on no more servers): that search then prunes from its first
		// node.
		best, start := lo, seedStart(m, q, seed)
		if start != nil && q.Value(start) > lo {
			best = q.Value(start)
		} else {
			start = nil
		}
		x := restricted(seed, best)
		if x == nil {
			x = start
		}
		if x != nil && q.Violation(x) <= 1e-6 && q.Value(x) > lo {
			incumbent = x // the search's point is kept at this point, where lo's is kept at its own
		}
	}
	if limit > 0 { // the seed's restricted MILP counts against the search's limit
		limit = max(limit-time.Since(began), time.Millisecond)
	}
	o := milp.Options{TimeLimit: limit, FirstPointGrace: grace, MaxNodes: opt.MaxNodes, Workers: workers, RelGap: gap,
		MaxStoreBytes: store, Incumbent: incumbent, RootBasis: basis, RootHeuristic: restricted}
	sol, err := milp.Solve(q, o)
	e := &evaluation{lo: math.Inf(-1), up: math.Inf(1), gap: gap}
	if prev != nil {
		e.up = prev.up
	}
	switch {
	case err != nil || sol.Unsolved > 0: // no bound to trust beyond the relaxation's
	case sol.Status == milp.Infeasible:
		e.up = math.Inf(-1)
	case sol.Status == milp.Optimal:
		e.up = min(e.up, sol.Objective+max(1e-9, gap*math.Abs(sol.Objective)))
	default:
		// A search stopped at a limit leaves out of its bound the nodes within its gap of the incumbent.
		e.up = min(e.up, max(sol.Bound, sol.Objective+max(1e-9, gap*math.Abs(sol.Objective))))
	}
	if sol.X != nil && sol.Objective > lo {
		e.x, e.lo = sol.X, sol.Objective
	} else if prev != nil {
		e.x, e.lo = prev.x, prev.lo
	}
	return e, sol.Nodes
}

// seedStart is seed's replica counts (its integer columns) at q's servers, with the batch sizes it uses and its
// flows solved again for q's demand: a point of q (nil: they do not fit).
func seedStart(m *model, q *milp.Problem, seed []float64) []float64 {
	r := *q
	r.Lower, r.Upper = slices.Clone(q.Lower), slices.Clone(q.Upper)
	m.restrictToBatches(m.fixedBatches(seed), r.Lower, r.Upper)
	for j, integer := range r.Integer {
		if !integer || r.Lower[j] == r.Upper[j] {
			continue
		}
		v := math.Round(seed[j])
		if v < r.Lower[j] || v > r.Upper[j] {
			return nil
		}
		r.Lower[j], r.Upper[j] = v, v
	}
	small, expand := r.WithoutZeroColumns()
	res, err := milp.Solve(small, milp.Options{MaxNodes: 1, NoStrongBranching: true})
	if err != nil || res.Status != milp.Optimal {
		return nil
	}
	return expand(res.X)
}

// knapsack is the most of sum_p weight[p] * f[p][n_p] over n_p with sum_p n_p <= all, and the n_p: -inf and nil
// when every choice has an f of -inf. Each f[p] is non-decreasing in n, over 0..all.
func knapsack(weight []float64, f [][]float64, all int) (float64, []int) {
	best := make([]float64, all+1) // the most over the pipelines so far using exactly t servers
	for t := range best {
		best[t] = math.Inf(-1)
	}
	best[0] = 0
	choice := make([][]int, len(f))
	next := make([]float64, all+1)
	for p, fp := range f {
		a := slices.IndexFunc(fp, func(v float64) bool { return !math.IsInf(v, -1) })
		if a < 0 {
			return math.Inf(-1), nil
		}
		b := a // beyond the first n at f's most, more servers add nothing
		for b < all && fp[b] < fp[all] {
			b++
		}
		choice[p] = make([]int, all+1)
		for t := range next {
			next[t] = math.Inf(-1)
		}
		for t, v := range best {
			if math.IsInf(v, -1) {
				continue
			}
			for n := a; n <= b && t+n <= all; n++ {
				if w := v + weight[p]*fp[n]; w > next[t+n] {
					next[t+n], choice[p][t+n] = w, n
				}
			}
		}
		best, next = next, best
	}
	t := argmax(best)
	if math.IsInf(best[t], -1) {
		return best[t], nil
	}
	ns := make([]int, len(f))
	value := best[t]
	for p := len(f) - 1; p >= 0; p-- {
		ns[p] = choice[p][t]
		t -= ns[p]
	}
	return value, ns
}

// argmax is the index of the largest of xs (the first of equals; 0 for none).
func argmax(xs []float64) int {
	t := 0
	for u, v := range xs {
		if v > xs[t] {
			t = u
		}
	}
	return t
}
