package milp

import (
	"math"
	"sort"
)

// Choosing the column to branch on: pseudo-costs, reliability branching and strong branching.

// pseudoCosts are, per column, the average increase of the LP value per unit of distance a branch moved the column,
// down and up: a cheap forecast of what branching on it would gain (Benichou et al. 1971), learnt as the search goes.
type pseudoCosts struct {
	sum [2][]float64
	n   [2][]int
	// all are the sums and counts over every column, the forecast for a column never branched on yet.
	allSum [2]float64
	allN   [2]int
}

func newPseudoCosts(n int) *pseudoCosts {
	return &pseudoCosts{sum: [2][]float64{make([]float64, n), make([]float64, n)}, n: [2][]int{make([]int, n), make([]int, n)}}
}

func (pc *pseudoCosts) record(col int, up bool, gain float64) {
	d := 0
	if up {
		d = 1
	}
	pc.sum[d][col] += gain
	pc.n[d][col]++
	pc.allSum[d] += gain
	pc.allN[d]++
}

func (pc *pseudoCosts) forecast(col int, up bool) float64 {
	d := 0
	if up {
		d = 1
	}
	switch {
	case pc.n[d][col] > 0:
		return pc.sum[d][col] / float64(pc.n[d][col])
	case pc.allN[d] > 0:
		return pc.allSum[d] / float64(pc.allN[d])
	}
	return 1
}

// growPseudoCosts gives the pseudo-costs room for the columns added since the last call.
func (s *search) growPseudoCosts() {
	if len(s.pc.sum[0]) < s.p.NumCols() {
		grow := s.p.NumCols() - len(s.pc.sum[0])
		for d := range 2 {
			s.pc.sum[d] = append(s.pc.sum[d], make([]float64, grow)...)
			s.pc.n[d] = append(s.pc.n[d], make([]int, grow)...)
		}
	}
}

// branchColumn is the fractional integer column of node n to branch on, with a lower bound on the LP value of its
// down and up children; or integral when x (the node's LP optimum, of value obj, from basis b) is integral, or
// prunedByStrongBranching when no child can improve the incumbent. Among the fractional columns of the highest
// priority it takes the one whose branches are forecast to move the bound most (the product of the two gains, so
// that both children gain). The forecast is the column's pseudo-costs once they are reliable, and strong branching
// before: a few dual simplex iterations on the LPs of both children, whose gains are recorded (reliability
// branching, Achterberg, Koch and Martin 2005): pseudo-costs alone, not yet learnt, choose blindly at the top of
// the tree, where the choice matters most.
func (s *search) branchColumn(lp *relaxation, n *node, x []float64, obj float64, b []byte) (int, [2]float64) {
	bounds := [2]float64{obj, obj}
	type candidate struct {
		j              int
		frac, forecast float64
	}
	score := func(down, up float64) float64 { return max(down, 1e-6) * max(up, 1e-6) }
	forecast := func(j int, f float64) float64 {
		return score(f*s.pc.forecast(j, false), (1-f)*s.pc.forecast(j, true))
	}
	prio := math.MinInt
	var cands []candidate
	for j, integer := range s.p.Integer {
		if !integer {
			continue
		}
		f := x[j] - math.Floor(x[j])
		if f < intTol || f > 1-intTol {
			continue
		}
		if s.p.Priority[j] > prio {
			prio, cands = s.p.Priority[j], cands[:0]
		}
		if s.p.Priority[j] == prio {
			cands = append(cands, candidate{j, f, forecast(j, f)})
		}
	}
	if len(cands) == 0 {
		return integral, bounds
	}
	sort.SliceStable(cands, func(a, c int) bool { return cands[a].forecast > cands[c].forecast })
	// An infeasible child (bound +Inf) is dead even before there is an incumbent to prune against.
	dead := func(b float64) bool { return math.IsInf(b, 1) || s.prunable(b) }
	col, best, strong, sinceBest := -1, -1.0, 0, 0
	for _, c := range cands {
		// Forecast again: the pseudo-costs, and their average for columns not yet observed, learn from the
		// candidates measured before this one.
		j, f := c.j, c.frac
		sc, childBounds := forecast(j, f), [2]float64{obj, obj}
		measure := !s.opt.NoStrongBranching && strong < maxStrongBranch && sinceBest < lookahead &&
			min(s.pc.n[0][j], s.pc.n[1][j]) < reliable
		if measure {
			strong++
			sinceBest++
			down := s.strongBranch(lp, n, j, n.lo[j], math.Floor(x[j]), obj, b)
			up := s.strongBranch(lp, n, j, math.Ceil(x[j]), n.up[j], obj, b)
			if dead(down.bound) && dead(up.bound) {
				return prunedByStrongBranching, bounds
			}
			if !math.IsInf(down.gain, 1) {
				s.pc.record(j, false, down.gain/f)
			}
			if !math.IsInf(up.gain, 1) {
				s.pc.record(j, true, up.gain/(1-f))
			}
			sc, childBounds = score(down.gain, up.gain), [2]float64{down.bound, up.bound}
		}
		if sc > best {
			col, best, bounds = j, sc, childBounds
			if measure {
				sinceBest = 0
			}
		}
	}
	return col, bounds
}

// Answers of branchColumn other than a column.
const (
	integral                = -1 // the LP optimum is integral
	prunedByStrongBranching = -2 // no child of the node can improve the incumbent
)

// Reliability branching: a column's pseudo-costs are trusted once both directions have been observed reliable
// times; a node strong-branches on at most maxStrongBranch columns, and stops once lookahead of them in a row have
// not beaten the best so far (Achterberg's lookahead), with strongIterations dual simplex iterations per child.
// Chosen on the traffic example's 50:1200:50 sweep (accuracy steps) among 1-4, 4-1000, 3-20 and 2-1000: the total,
// median and slowest solve times move little around these values.
const (
	reliable         = 1
	maxStrongBranch  = 16
	strongIterations = 5
	lookahead        = 4
)

// strongEstimate is what strong branching learnt of one child: how much its LP rose above the parent's (+Inf when
// infeasible), and a lower bound on its LP value.
type strongEstimate struct {
	gain, bound float64
}

// strongBranch estimates the child of node n (LP value obj, basis b) whose column j lies in [lo, up] by a few dual
// simplex iterations from b. The dual simplex's objective only rises, so the value reached is the child's gain so
// far. It bounds the child only when the LP finished without a pricer: an LP over the columns priced so far may
// be worse than the child's, which the pricer would improve. It releases s.mu while the LP solves.
func (s *search) strongBranch(lp *relaxation, n *node, j int, lo, up, obj float64, b []byte) strongEstimate {
	l, u := n.lo[j], n.up[j]
	n.lo[j], n.up[j] = lo, up
	s.mu.Unlock()
	st, v, finished := lp.estimate(n.lo, n.up, b, strongIterations)
	s.mu.Lock()
	n.lo[j], n.up[j] = l, u
	e := strongEstimate{bound: obj}
	switch st {
	case lpInfeasible:
		e.gain = math.Inf(1)
	case lpOptimal:
		e.gain = max(0, v-obj)
	}
	if finished && s.opt.Pricer == nil {
		e.bound = obj + e.gain
	}
	return e
}

// split makes the children of n on column col at value v, with lower bounds on their LP values (down, up); the
// child to explore first comes last.
func split(n *node, col int, v float64, bounds [2]float64) []*node {
	child := func(lo, up float64) *node {
		c := &node{branch: boundChange{col: int32(col), lo: lo, up: up}, depth: n.depth + 1, col: col}
		// The distance the branch moves the column from v, for the pseudo-costs.
		switch {
		case up < v:
			c.dist, c.bound = v-up, bounds[0]
		case lo > v:
			c.up1, c.dist, c.bound = true, lo-v, bounds[1]
		default:
			c.bound = min(bounds[0], bounds[1])
		}
		return c
	}
	lo, up := n.lo[col], n.up[col]
	r := math.Round(v)
	if math.Abs(v-r) < intTol { // integral: fix it at v, or move it away on either side
		var out []*node
		if r-1 >= lo {
			out = append(out, child(lo, r-1))
		}
		if r+1 <= up {
			out = append(out, child(r+1, up))
		}
		return append(out, child(r, r))
	}
	down, upc := child(lo, math.Floor(v)), child(math.Ceil(v), up)
	if v-math.Floor(v) >= 0.5 {
		return []*node{down, upc}
	}
	return []*node{upc, down}
}
