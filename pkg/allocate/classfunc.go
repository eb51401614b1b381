// A pipeline's best objective as a function of its servers of two classes, f(a, b), as the decomposition of a joint
// plan on two server classes knows it (jointclasses.go): serversFunc's counterpart over a grid of counts.

package allocate

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// classesFunc is f(a, b) of the pipelines whose accuracy-step models are one problem, a and b its servers of the two
// classes of the cluster left (classSplit's order: the knapsack's class first, the priced one second): what is
// known of it so far.
type classesFunc struct {
	m *model
	// prob is m's problem with each servers row bounded by a column of its own (fixed by its bounds) instead of a
	// number.
	prob  *milp.Problem
	given [2]int
	size  [2]int // the servers of each class left: f is known over 0..size[0] x 0..size[1]
	lp    *milp.ParametricLP
	// lps is where the relaxation was solved. Its value is jointly concave in (a, b), so each value and gradient
	// bounds f everywhere (a tangent plane); lpUp is the least of those planes on the grid, -inf where the
	// relaxation has no point (none at fewer servers of both classes either).
	lps  map[[2]int]bool
	lpUp []float64
	// bases is the relaxation's optimal basis at each point where it has one: a search there starts its root from
	// it (a few pivots, where a cold start takes as long as a dozen nodes).
	bases map[[2]int][]byte
	// evals is what branch-and-bound found at the points where it ran; up is the bound on the grid from both,
	// computed again when stale.
	evals map[[2]int]*evaluation
	up    []float64
	stale bool
	// peers are the functions of the other pipelines whose problems have these columns (copies of one spec at
	// other demands), and shared guards their evals, which their searches write while this one's runs.
	peers  []*classesFunc
	shared *sync.RWMutex
}

// newClassesFunc is m's classesFunc over the classes (their servers left size), with its relaxation solved on all of
// them and then at share; nil when m has not exactly their two servers rows, the relaxation has no point on all of
// them or Clp fails.
func newClassesFunc(m *model, classes [2]string, size, share [2]int) *classesFunc {
	q := *m.prob
	q.Obj = slices.Clone(q.Obj)
	q.Lower, q.Upper = slices.Clone(q.Lower), slices.Clone(q.Upper)
	q.Integer, q.Names, q.Priority = slices.Clone(q.Integer), slices.Clone(q.Names), slices.Clone(q.Priority)
	q.Rows = slices.Clone(q.Rows)
	var given [2]int
	for k, c := range classes {
		given[k] = q.AddCol("servers given on "+c, 0, 0, 0, true, 0)
	}
	found := [2]int{}
	for i, r := range q.Rows {
		c, ok := classOfServersRow(r.Name)
		if !ok {
			continue
		}
		k := slices.Index(classes[:], c)
		if k < 0 {
			return nil
		}
		found[k]++
		q.Rows[i].Terms = append(slices.Clone(r.Terms), milp.Term{Col: given[k], Coef: -1})
		q.Rows[i].Lo, q.Rows[i].Hi = math.Inf(-1), 0
	}
	if found != [2]int{1, 1} {
		return nil
	}
	lp, err := milp.NewParametricLPOver(&q, given[0], given[1])
	if err != nil {
		return nil
	}
	cells := (size[0] + 1) * (size[1] + 1)
	f := &classesFunc{m: m, prob: &q, given: given, size: size, lp: lp, lps: map[[2]int]bool{},
		bases: map[[2]int][]byte{}, lpUp: make([]float64, cells), evals: map[[2]int]*evaluation{},
		up: make([]float64, cells), stale: true}
	for i := range f.lpUp {
		f.lpUp[i] = math.Inf(1)
	}
	if !f.relax(size) || math.IsInf(f.lpUp[f.cell(size)], -1) || !f.relax(share) {
		return nil
	}
	return f
}

// cell is n's index in the grid.
func (f *classesFunc) cell(n [2]int) int { return n[0]*(f.size[1]+1) + n[1] }

// relax solves the relaxation at n and bounds the grid with it (false: Clp failed).
func (f *classesFunc) relax(n [2]int) bool {
	ok, feasible, value, slopes := f.lp.AtPoint([]float64{float64(n[0]), float64(n[1])})
	if !ok {
		return false
	}
	f.lps[n], f.stale = true, true
	w := f.size[1] + 1
	if !feasible { // more servers never hurt: no point with fewer of both either
		for a := 0; a <= n[0]; a++ {
			for b := 0; b <= n[1]; b++ {
				f.lpUp[a*w+b] = math.Inf(-1)
			}
		}
		return true
	}
	f.bases[n] = f.lp.Basis()
	s0, s1 := max(slopes[0], 0), max(slopes[1], 0) // the value is non-decreasing in both
	for a := 0; a <= f.size[0]; a++ {
		row := value + s0*float64(a-n[0]) + lpSlack
		for b := 0; b <= f.size[1]; b++ {
			if v := row + s1*float64(b-n[1]); v < f.lpUp[a*w+b] {
				f.lpUp[a*w+b] = v
			}
		}
	}
	return true
}

// bounds is up[cell(n)] >= f(n) over the grid (-inf: no point), non-decreasing in both counts.
func (f *classesFunc) bounds() []float64 {
	if !f.stale {
		return f.up
	}
	// A search's bound at n bounds f at fewer servers of both classes too: the least of those at n or beyond.
	w := f.size[1] + 1
	for a := f.size[0]; a >= 0; a-- {
		for b := f.size[1]; b >= 0; b-- {
			c := math.Inf(1)
			if e := f.evals[[2]int{a, b}]; e != nil {
				c = e.up
			}
			if a < f.size[0] {
				c = min(c, f.up[(a+1)*w+b])
			}
			if b < f.size[1] {
				c = min(c, f.up[a*w+b+1])
			}
			f.up[a*w+b] = c
		}
	}
	for i, u := range f.lpUp {
		f.up[i] = min(f.up[i], u)
	}
	f.stale = false
	return f.up
}

// exact says f's bound at n is the relaxation's own there or branch-and-bound's, not a tangent's from elsewhere.
func (f *classesFunc) exact(n [2]int) bool {
	return f.lps[n] || f.evals[n] != nil || math.IsInf(f.lpUp[f.cell(n)], -1)
}

// bestBelow is the best point found at n or fewer servers of both classes, and where (nil: none).
func (f *classesFunc) bestBelow(n [2]int) (*evaluation, [2]int) {
	var best *evaluation
	var at [2]int
	for m, e := range f.evals {
		if e.x != nil && m[0] <= n[0] && m[1] <= n[1] && (best == nil || e.lo > best.lo || e.lo == best.lo &&
			(m[0] < at[0] || m[0] == at[0] && m[1] < at[1])) {
			best, at = e, m
		}
	}
	return best, at
}

// nearest is the point found nearest n (the fewest servers to move), n's own excepted, and where (nil: none).
func (f *classesFunc) nearest(n [2]int) (*evaluation, [2]int) {
	var best *evaluation
	var at [2]int
	d := func(m [2]int) int { return abs(m[0]-n[0]) + abs(m[1]-n[1]) }
	for m, e := range f.evals {
		if e.x != nil && m != n && (best == nil || d(m) < d(at) || d(m) == d(at) && (e.lo > best.lo ||
			e.lo == best.lo && (m[0] < at[0] || m[0] == at[0] && m[1] < at[1]))) {
			best, at = e, m
		}
	}
	return best, at
}

func abs(v int) int { return max(v, -v) }

// classPoint is a point found at servers at, of value value.
type classPoint struct {
	at    [2]int
	value float64
}

// points is the points found that no other point beats on both counts and value: a plan's choices.
func (f *classesFunc) points() []classPoint {
	var all []classPoint
	for n, e := range f.evals {
		if e.x != nil {
			all = append(all, classPoint{n, e.lo})
		}
	}
	var out []classPoint
	for _, p := range all {
		beaten := false
		for _, q := range all {
			if q.at != p.at && q.at[0] <= p.at[0] && q.at[1] <= p.at[1] && q.value >= p.value {
				beaten = true
				break
			}
		}
		if !beaten {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b classPoint) int {
		if a.at[0] != b.at[0] {
			return a.at[0] - b.at[0]
		}
		return a.at[1] - b.at[1]
	})
	return out
}

// evaluate runs branch-and-bound on f(n) to relative gap gap, from the best point known at fewer servers, as
// serversFunc.evaluate does; it returns the nodes it explored.
func (f *classesFunc) evaluate(n [2]int, gap float64, limit, grace time.Duration, workers int, store int64,
	opt Options) int {
	q := *f.prob
	q.Lower, q.Upper = slices.Clone(q.Lower), slices.Clone(q.Upper)
	for k, c := range f.given {
		q.Lower[c], q.Upper[c] = float64(n[k]), float64(n[k])
	}
	lo := math.Inf(-1)
	var incumbent []float64
	if best, _ := f.bestBelow(n); best != nil {
		lo, incumbent = best.lo, slices.Clone(best.x)
		for k, c := range f.given {
			incumbent[c] = float64(n[k])
		}
	}
	var seed []float64
	if e, _ := f.nearest(n); e != nil && e.lo > lo {
		seed = e.x
	} else if e == nil {
		seed = f.peerSeed(n)
	}
	e, nodes := searchFixed(f.m, &q, incumbent, lo, seed, f.bases[n], f.evals[n], gap, limit, grace, workers, store,
		opt)
	if f.shared != nil {
		f.shared.Lock()
		defer f.shared.Unlock()
	}
	f.evals[n], f.stale = e, true
	return nodes
}

// peerSeed is the point of a peer nearest n, the better of those as near (nil: none), for a function with no point
// of its own yet: its batch sizes, a copy of the spec's at another demand, are tried first (a restricted MILP at n).
// Measured on BenchmarkJointAtScale's spread demands on two classes, to a proven 0.5%: at 10 pipelines 110 nodes
// where the first searches without took 216, at 20 225 where they took 701 (social's copies then stop at their
// root where they took 26-226 nodes).
func (f *classesFunc) peerSeed(n [2]int) []float64 {
	if f.shared != nil {
		f.shared.RLock()
		defer f.shared.RUnlock()
	}
	var best *evaluation
	var at [2]int
	d := -1
	for _, g := range f.peers {
		for m, e := range g.evals {
			dm := abs(m[0]-n[0]) + abs(m[1]-n[1])
			if e.x != nil && (d < 0 || dm < d || dm == d && (e.lo > best.lo || e.lo == best.lo &&
				(m[0] < at[0] || m[0] == at[0] && m[1] < at[1]))) {
				best, at, d = e, m, dm
			}
		}
	}
	if best == nil {
		return nil
	}
	return best.x
}

// sameColumns says problems p and q have the same columns by name.
func sameColumns(p, q *milp.Problem) bool { return slices.Equal(p.Names, q.Names) }
