// The accuracy step of several pipelines decomposed over the servers of two classes (issue 48): jointsplit.go's
// decomposition with each pipeline's f over a grid of counts, f(a, b). The knapsack over vectors of counts is priced
// instead of solved: the row of the class with more servers gets a price mu per server, each pipeline then takes the
// b that is best at that price for each a, and a knapsack over a (the class with fewer servers) remains. For every
// mu >= 0 that is an upper bound on the joint optimum (Lagrangian relaxation of the priced row); mu is chosen by
// bisection on how many servers of the priced class the choices use. The plan is exact over the points found: a
// knapsack over both counts (a dynamic programme over the grid), with few choices per pipeline. Both are proven, so
// is the gap between them.

package allocate

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// coarseClassGap is coarseGap on two classes. A model on two classes is two to three times the size of one on a
// class, and a search of the traffic example's to 0.1% took 100-500 ms where its root LP was within 0.3-0.4% of
// its optimum: at 0.3% such a search ends at its root once a point close to the optimum is found. Measured on
// BenchmarkJointAtScale with two classes at 1 s, three runs each: 0.1% 0.47-0.56% (10 pipelines) and 0.38-0.69%
// (20); 0.3% 0.35-0.66% and 0.41%.
const coarseClassGap = 3e-3

// priceSteps bounds the bisection on the price of a server of the priced class.
const priceSteps = 40

// splitClasses is splitAccuracy on a cluster left of two classes.
func (s *jointSolve) splitClasses(parts []*jointPart, class int, left plan.Cluster) (milp.Result, bool, error) {
	k, r := 0, 1 // the knapsack over the class of fewer servers, the other's row priced
	if left[0].Servers > left[1].Servers {
		k, r = 1, 0
	}
	cs := &classSplit{s: s, of: make([]int, len(parts)), weight: make([]float64, len(parts)),
		size: [2]int{left[k].Servers, left[r].Servers}, target: s.opt.Gap}
	classes := [2]string{left[k].Name, left[r].Name}
	if cs.target == 0 {
		cs.target = 1e-6 // pkg/milp's default
	}
	var models []*model // of each function
	for i, pt := range parts {
		if pt.m.priced {
			return milp.Result{}, false, nil
		}
		cs.weight[i] = pt.weight
		cs.of[i] = slices.IndexFunc(models, func(m *model) bool { return sameProblem(m.prob, pt.m.prob) })
		if cs.of[i] < 0 {
			cs.of[i] = len(models)
			models = append(models, pt.m)
		}
	}
	// Each function's relaxations are its own Clp model's: different functions' are solved at once.
	cs.fs = make([]*classesFunc, len(models))
	ok := make([]bool, len(models))
	inParallel(s.opt.workers(), len(models), func(k int) {
		cs.fs[k] = newClassesFunc(models[k], classes, cs.size, [2]int{cs.size[0] / len(parts), cs.size[1] / len(parts)})
		ok[k] = cs.fs[k] != nil
	})
	if slices.Contains(ok, false) {
		return milp.Result{}, false, nil
	}
	shared := &sync.RWMutex{}
	for _, f := range cs.fs {
		f.shared = shared
		for _, g := range cs.fs {
			if g != f && sameColumns(f.prob, g.prob) {
				f.peers = append(f.peers, g)
			}
		}
	}
	cs.setDeadline(s)
	cs.reshare = true
	if !cs.run() {
		return milp.Result{}, false, nil
	}
	return s.keepSplit(parts, class, left, func(i int) []float64 { return cs.fs[cs.of[i]].evals[cs.nLo[i]].x },
		cs.nodes, cs.up, cs.within)
}

// classSplit is the state of one decomposition over two classes.
type classSplit struct {
	s      *jointSolve
	fs     []*classesFunc
	of     []int // per part, its function
	weight []float64
	size   [2]int // the servers of the knapsack's class and of the priced one
	target float64
	// up is the least upper bound found (over the prices tried) and guides the choices of the knapsack over the
	// bounds at the prices on either side of the best one; mu the last best price.
	up     float64
	guides [][][2]int
	mu     float64
	// lo is the best plan over the points found, nLo its choices (nil: none yet).
	lo  float64
	nLo [][2]int
	searchClock
}

// within says bound up is within the target gap of value lo (as split.within).
func (cs *classSplit) within(lo, up float64) bool {
	return up-lo <= (cs.target*math.Abs(lo)+1e-9*float64(len(cs.of)))*(1+1e-9)
}

// closed says the plan is within the target gap of the bound.
func (cs *classSplit) closed() bool { return cs.nLo != nil && cs.within(cs.lo, cs.up) }

// run learns each f where the priced knapsack over the bounds needs it, as split.run does: the relaxation first where
// a choice's bound is a tangent's, then searches at the choices, until the gap is closed, the deadline passes with a
// plan, or nothing is left to learn; false when it ends with no plan.
func (cs *classSplit) run() bool {
	cs.plan()
	for {
		cs.upper()
		if cs.guides == nil || cs.closed() {
			break
		}
		if relaxed, ok := cs.relaxGuides(); !ok {
			return false
		} else if relaxed {
			continue
		}
		if cs.late(time.Now()) && (cs.nLo != nil || time.Now().After(cs.grace)) {
			break
		}
		work := cs.work()
		if len(work) == 0 {
			break
		}
		jobs := make([]searchJob, len(work))
		for i, w := range work {
			jobs[i] = searchJob{f: w.f, run: func(limit, grace time.Duration, workers int, store int64) int {
				return cs.fs[w.f].evaluate(w.n, w.gap, limit, grace, workers, store, cs.s.opt)
			}}
		}
		cs.runSearches(cs.s.opt, cs.nLo != nil, jobs)
		cs.plan()
	}
	return cs.nLo != nil
}

// relaxGuides solves the relaxation at the guides' points where a function's bound is a tangent's, different
// functions at once on the options' workers, each function's in the guides' order; relaxed says it solved some, ok
// false that Clp failed.
func (cs *classSplit) relaxGuides() (relaxed, ok bool) {
	at := make([][][2]int, len(cs.fs))
	for _, g := range cs.guides {
		for i, n := range g {
			if k := cs.of[i]; !cs.fs[k].exact(n) && !slices.Contains(at[k], n) {
				at[k] = append(at[k], n)
				relaxed = true
			}
		}
	}
	failed := make([]bool, len(cs.fs))
	inParallel(cs.s.opt.workers(), len(cs.fs), func(k int) {
		f := cs.fs[k]
		for _, n := range at[k] {
			if !f.exact(n) && !f.relax(n) { // an earlier point may have made it exact (no point there)
				failed[k] = true
				return
			}
		}
	})
	return relaxed, !slices.Contains(failed, true)
}

// classSearch is one branch-and-bound to run: f at n to gap.
type classSearch struct {
	f   int
	n   [2]int
	gap float64
}

// work is the searches the guides ask for, as split.work: where none ran yet at coarseGap, else again at the target
// gap, those that may close the most of the gap first; a guide's before the next's (the first fits both classes:
// its searches give a plan).
func (cs *classSplit) work() []classSearch {
	coarse := max(cs.target, coarseClassGap)
	for _, again := range []bool{false, true} {
		for _, g := range cs.guides {
			var w []classSearch
			open := map[classSearch]float64{}
			for i, n := range g {
				k := cs.of[i]
				f := cs.fs[k]
				e := f.evals[n]
				if again && (e == nil || e.gap <= cs.target) || !again && e != nil {
					continue
				}
				a := classSearch{k, n, coarse}
				if again {
					a.gap = cs.target
				}
				if !slices.Contains(w, a) {
					w = append(w, a)
				}
				lo := math.Inf(-1)
				if best, _ := f.bestBelow(n); best != nil {
					lo = best.lo
				}
				open[a] += cs.weight[i] * (f.bounds()[f.cell(n)] - max(lo, 0))
			}
			if len(w) > 0 {
				slices.SortStableFunc(w, func(a, b classSearch) int { return cmp.Compare(open[b], open[a]) })
				return w
			}
		}
	}
	return nil
}

// priced is the knapsack over the bounds at price mu on the priced class: its value (an upper bound on the joint
// optimum, -inf when no choice has a bound), each pipeline's counts, and the priced class's servers they use.
func (cs *classSplit) priced(mu float64) (float64, [][2]int, int) {
	ups := make([][]float64, len(cs.fs))
	for k, f := range cs.fs {
		ups[k] = f.bounds()
	}
	w := cs.size[1] + 1
	gs, args := make([][]float64, len(cs.of)), make([][]int, len(cs.of))
	for i, k := range cs.of {
		if j := slices.IndexFunc(cs.of[:i], func(kj int) bool { return kj == k }); j >= 0 && cs.weight[j] == cs.weight[i] {
			gs[i], args[i] = gs[j], args[j]
			continue
		}
		g, arg := make([]float64, cs.size[0]+1), make([]int, cs.size[0]+1)
		for a := range g {
			g[a], arg[a] = math.Inf(-1), -1
			row := ups[k][a*w : (a+1)*w]
			for b, u := range row {
				if math.IsInf(u, -1) {
					continue
				}
				if v := cs.weight[i]*u - mu*float64(b); v > g[a] {
					g[a], arg[a] = v, b
				}
				if u >= row[cs.size[1]] {
					break // more of the priced class adds nothing but its price
				}
			}
		}
		gs[i], args[i] = g, arg
	}
	ones := make([]float64, len(cs.of))
	for i := range ones {
		ones[i] = 1
	}
	value, as := knapsack(ones, gs, cs.size[0])
	if as == nil {
		return value, nil, 0
	}
	ns, used := make([][2]int, len(as)), 0
	for i, a := range as {
		ns[i] = [2]int{a, args[i][a]}
		used += ns[i][1]
	}
	return value + mu*float64(cs.size[1]), ns, used
}

// upper sets the bound up, the least over the prices tried, and the guides: the choices at the least price found
// whose choices fit the priced class, and at the price below it that does not.
func (cs *classSplit) upper() {
	if !cs.s.in.pricedBound && cs.exactUpper() {
		return
	}
	value, ns, used := cs.priced(0)
	cs.up, cs.guides = value, nil
	if ns == nil {
		return
	}
	if used <= cs.size[1] {
		cs.guides, cs.mu = [][][2]int{ns}, 0
		return
	}
	lo, hi, nsLo := 0.0, max(cs.mu, 1e-6), ns
	var nsHi [][2]int
	valueLo, valueHi := value, math.Inf(1)
	slopeLo, slopeHi := float64(cs.size[1]-used), 0.0
	for step := 0; step < priceSteps; step++ {
		mu := hi
		if nsHi != nil {
			mu = (lo + hi) / 2
		}
		v, n, u := cs.priced(mu)
		if n == nil {
			break
		}
		cs.up = min(cs.up, v)
		if u <= cs.size[1] {
			hi, nsHi, valueHi, slopeHi = mu, n, v, float64(cs.size[1]-u)
		} else {
			lo, nsLo, valueLo, slopeLo = mu, n, v, float64(cs.size[1]-u)
			if nsHi == nil {
				hi *= 4
			}
		}
		if nsHi != nil && slopeHi > slopeLo {
			// The value is convex in mu: its tangents at lo and hi meet below its least, which is within the
			// target of the best found when they meet within it.
			cross := valueLo + slopeLo*(valueHi-valueLo-slopeHi*(hi-lo))/(slopeLo-slopeHi)
			if cs.up-cross <= 0.01*cs.target*math.Abs(cs.up) {
				break
			}
		}
	}
	cs.mu = hi
	cs.guides = [][][2]int{cs.balance(nsLo)}
	if nsHi != nil {
		cs.guides = [][][2]int{cs.balance(cs.fill(nsHi)), cs.balance(nsHi), cs.guides[0]}
	}
}

// balance gives the copies of one function (one f, one weight) in choices ns counts that differ by at most one of
// each class, the same in all where they can, when that bounds the copies' sum at least as high: where the bounds are
// planes (or concave) the knapsack is indifferent to how copies share their servers, and a search at one point
// serves every copy at it.
func (cs *classSplit) balance(ns [][2]int) [][2]int {
	out := slices.Clone(ns)
	done := make([]bool, len(ns))
	for i := range ns {
		if done[i] {
			continue
		}
		var group []int
		for j := i; j < len(ns); j++ {
			if cs.of[j] == cs.of[i] && cs.weight[j] == cs.weight[i] {
				group = append(group, j)
				done[j] = true
			}
		}
		if len(group) < 2 {
			continue
		}
		f := cs.fs[cs.of[i]]
		up := f.bounds()
		var total [2]int
		before := 0.0
		for _, j := range group {
			total[0], total[1] = total[0]+ns[j][0], total[1]+ns[j][1]
			before += up[f.cell(ns[j])]
		}
		even := make([][2]int, len(group))
		after := 0.0
		for g := range group {
			for c := range 2 {
				even[g][c] = total[c] / len(group)
				if g < total[c]%len(group) {
					even[g][c]++
				}
			}
			after += up[f.cell(even[g])]
		}
		if after >= before {
			for g, j := range group {
				out[j] = even[g]
			}
		}
	}
	return out
}

// fill gives the servers of the priced class that choices ns (which fit both classes) leave unused to the pipelines
// whose bounds gain the most a server from them, a few at a time: at the best price, the choices on either side of
// it differ by pipelines that gain about the price a server over a range of servers (where their bound is a
// tangent), and the plan is among the choices between.
func (cs *classSplit) fill(ns [][2]int) [][2]int {
	out := slices.Clone(ns)
	left := cs.size[1]
	for _, n := range out {
		left -= n[1]
	}
	for left > 0 {
		best, bi, bj := 0.0, -1, 0
		for i, n := range out {
			f := cs.fs[cs.of[i]]
			up := f.bounds()
			from := up[f.cell(n)]
			for j := 1; j <= left && n[1]+j <= cs.size[1]; j++ {
				if gain := cs.weight[i] * (up[f.cell([2]int{n[0], n[1] + j})] - from) / float64(j); gain > best {
					best, bi, bj = gain, i, j
				}
			}
		}
		if bi < 0 {
			break
		}
		out[bi][1] += bj
		left -= bj
	}
	return out
}

// exactWork bounds the work of the exact knapsack over the bounds (grid cells times choices, over the pipelines):
// past it, the bound is priced (upper). A few milliseconds.
const exactWork = 4e6

// exactUpper sets up and the guide to the knapsack over the bounds on both counts, solved exactly by dynamic
// programming over the grid, when that is cheap (exactWork; small clusters), and says whether it did. Then the
// gap closes as split's does: the guide's points, searched to the target, fit both classes.
func (cs *classSplit) exactUpper() bool {
	cells := (cs.size[0] + 1) * (cs.size[1] + 1)
	if float64(cells)*float64(cells)*float64(len(cs.of)) > 4*exactWork {
		return false // the choices are not fewer than a quarter of the cells
	}
	choices := make([][]classPoint, len(cs.fs))
	work := 0.0
	for k, f := range cs.fs {
		up := f.bounds()
		for a := 0; a <= cs.size[0]; a++ {
			for b := 0; b <= cs.size[1]; b++ {
				u := up[f.cell([2]int{a, b})]
				// a point with no more bound than one with fewer servers is never needed
				if math.IsInf(u, -1) || a > 0 && up[f.cell([2]int{a - 1, b})] >= u ||
					b > 0 && up[f.cell([2]int{a, b - 1})] >= u {
					continue
				}
				choices[k] = append(choices[k], classPoint{[2]int{a, b}, u})
			}
		}
	}
	for _, k := range cs.of {
		work += float64(cells) * float64(len(choices[k]))
	}
	if work > exactWork {
		return false
	}
	cs.up, cs.guides = math.Inf(-1), nil
	if value, ns := cs.gridKnapsack(choices); ns != nil {
		cs.up, cs.guides = value, [][][2]int{ns}
	}
	return true
}

// plan sets lo and nLo: the best choice of a point found per pipeline whose counts fit both classes.
func (cs *classSplit) plan() {
	pts := make([][]classPoint, len(cs.fs))
	for k, f := range cs.fs {
		pts[k] = f.points()
	}
	cs.lo, cs.nLo = cs.gridKnapsack(pts)
}

// gridKnapsack is the most of the sum over the pipelines of weight times value of one choice each (choices[of[i]])
// whose counts fit both classes, by dynamic programming over the servers used of each, and the choices' counts
// (-inf and nil: none fits).
func (cs *classSplit) gridKnapsack(choices [][]classPoint) (float64, [][2]int) {
	w := cs.size[1] + 1
	best := make([]float64, (cs.size[0]+1)*w)
	for t := range best {
		best[t] = math.Inf(-1)
	}
	best[0] = 0
	next := make([]float64, len(best))
	choice := make([][]int32, len(cs.of))
	for i, k := range cs.of {
		if len(choices[k]) == 0 {
			return math.Inf(-1), nil
		}
		for t := range next {
			next[t] = math.Inf(-1)
		}
		choice[i] = make([]int32, len(best))
		for t, v := range best {
			if math.IsInf(v, -1) {
				continue
			}
			a, b := t/w, t%w
			for c, p := range choices[k] {
				if a+p.at[0] > cs.size[0] || b+p.at[1] > cs.size[1] {
					continue
				}
				u := (a+p.at[0])*w + b + p.at[1]
				if x := v + cs.weight[i]*p.value; x > next[u] {
					next[u], choice[i][u] = x, int32(c)
				}
			}
		}
		best, next = next, best
	}
	t := argmax(best)
	if math.IsInf(best[t], -1) {
		return best[t], nil
	}
	value, ns := best[t], make([][2]int, len(cs.of))
	for i := len(cs.of) - 1; i >= 0; i-- {
		p := choices[cs.of[i]][choice[i][t]]
		ns[i] = p.at
		t -= p.at[0]*w + p.at[1]
	}
	return value, ns
}
