// The accuracy step of several pipelines decomposed over the servers they share (issue 48). In that step the
// objective is, over one class, the sum of each pipeline's weight times its own model's objective, and the
// pipelines meet only in the servers row: with f_p(n) the best objective of pipeline p alone on n servers, the
// joint optimum is the most of sum_p w_p f_p(n_p) with sum_p n_p <= N, a knapsack over n. Each f_p is learnt where
// the knapsack needs it: bounded everywhere by its LP relaxation (concave in n: each value and slope is a tangent),
// then searched by branch-and-bound at the n that the knapsack over the bounds picks, until the knapsack over the
// points found is within the gap of the knapsack over the bounds. That is a proven gap: both knapsacks are exact.

package allocate

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// coarseGap is the relative gap of a pipeline's first search at a number of servers: a few nodes where the
// default's proof takes hundreds. Searches at the n the knapsack settles on are run again to the step's own gap
// while the time allows.
const coarseGap = 1e-3

// solveAccuracy solves an accuracy step of parts (class's pipelines) on the servers left: by decomposition where it
// applies (splitAccuracy), by the joint MILP otherwise.
func (s *jointSolve) solveAccuracy(parts []*jointPart, class int, left plan.Cluster) (milp.Result, error) {
	if !s.in.wholeMILP {
		if sol, ok, err := s.splitAccuracy(parts, class, left); ok || err != nil {
			return sol, err
		}
	}
	return s.solveWith(parts, class, left, false)
}

// splitAccuracy solves the accuracy step by decomposition, and keeps parts as solveWith does. It applies (ok) to
// several pipelines on one server class with no class kept above them (a floor on a kept class's accuracy would tie
// its pipelines together), and when every pipeline's relaxation has a point on all the servers left; on two classes
// splitClasses decomposes it (jointclasses.go), on three or more the joint MILP solves it.
func (s *jointSolve) splitAccuracy(parts []*jointPart, class int, left plan.Cluster) (milp.Result, bool, error) {
	if len(parts) < 2 || len(s.kept) > 0 {
		return milp.Result{}, false, nil
	}
	if len(left) == 2 {
		return s.splitClasses(parts, class, left)
	}
	if len(left) != 1 {
		return milp.Result{}, false, nil
	}
	all := left.Total()
	fs, of := []*serversFunc{}, make([]int, len(parts)) // the functions, and each part's
	for i, pt := range parts {
		if pt.m.priced {
			return milp.Result{}, false, nil
		}
		of[i] = slices.IndexFunc(fs, func(f *serversFunc) bool { return sameProblem(f.m.prob, pt.m.prob) })
		if of[i] < 0 {
			f := newServersFunc(pt.m, all)
			if f == nil {
				return milp.Result{}, false, nil
			}
			of[i] = len(fs)
			fs = append(fs, f)
			f.relax(all / len(parts))
		}
	}
	sp := &split{s: s, fs: fs, of: of, weight: make([]float64, len(parts)), all: all, target: s.opt.Gap}
	if sp.target == 0 {
		sp.target = 1e-6 // pkg/milp's default
	}
	for i, pt := range parts {
		sp.weight[i] = pt.weight
	}
	sp.setDeadline(s)
	if !sp.run() {
		return milp.Result{}, false, nil
	}
	return sp.result(parts, class, left)
}

// split is the state of one decomposition.
type split struct {
	s      *jointSolve
	fs     []*serversFunc
	of     []int // per part, its function
	weight []float64
	all    int
	target float64
	// up and lo are the knapsacks over the bounds and over the points found, and nUp, nLo their choices.
	up, lo   float64
	nUp, nLo []int
	searchClock
}

// searchClock is the searches of a decomposition against its deadline.
type searchClock struct {
	// deadline is when the searches stop improving the gap (zero: never); grace how long they may go on for the
	// first point of every pipeline (firstPointGrace).
	deadline, grace time.Time
	nodes           int
	// searches is the searches run and searchTime their time, whose mean says when one would end past the
	// deadline.
	searches   int
	searchTime time.Duration
	// reshare gives each search an equal share of the time left when it starts, rather than of the time left when
	// the searches start.
	reshare bool
}

// setDeadline sets the deadline of a step of s under its options' time limit: within the limit from SolveJoint's
// start, the steps before this one's included (a pipeline's hardware step is a fraction of a millisecond); a step
// after it (the overloaded one's) gets a limit of its own.
func (c *searchClock) setDeadline(s *jointSolve) {
	if lim := s.opt.TimeLimit; lim > 0 {
		from := s.start
		if time.Since(from) > lim/2 {
			from = time.Now()
		}
		c.deadline, c.grace = from.Add(lim), from.Add(lim+firstPointGrace*lim)
	}
}

// late says a search started at now would likely end past the deadline.
func (c *searchClock) late(now time.Time) bool {
	if c.deadline.IsZero() {
		return false
	}
	mean := time.Duration(0)
	if c.searches > 0 {
		mean = c.searchTime / time.Duration(c.searches)
	}
	return now.Add(mean / 2).After(c.deadline)
}

// knapsacks solves both knapsacks over what is known of each f.
func (sp *split) knapsacks() {
	ups, los := make([][]float64, len(sp.of)), make([][]float64, len(sp.of))
	for k, f := range sp.fs {
		up, lo, _ := f.bounds(sp.all)
		for i, fi := range sp.of {
			if fi == k {
				ups[i], los[i] = up, lo
			}
		}
	}
	sp.up, sp.nUp = knapsack(sp.weight, ups, sp.all)
	sp.lo, sp.nLo = knapsack(sp.weight, los, sp.all)
}

// closed says the points found are within the target gap of the bound.
func (sp *split) closed() bool {
	return sp.nLo != nil && sp.within(sp.lo, sp.up)
}

// within says bound up is within the target gap of value lo. Searches to the target gap give bounds that add up to
// it exactly, and absolute gaps for values near zero: both allowed for, and the sum's rounding.
func (sp *split) within(lo, up float64) bool {
	return up-lo <= (sp.target*math.Abs(lo)+1e-9*float64(len(sp.of)))*(1+1e-9)
}

// run learns each f where the knapsack over the bounds needs it, until the gap is closed, the deadline passes with
// a point for every pipeline, or nothing is left to learn; false when it ends with no plan (the joint MILP then
// decides, proven infeasible included: its max-demand step follows).
func (sp *split) run() bool {
	for {
		sp.knapsacks()
		if sp.nUp == nil || sp.closed() {
			break
		}
		// The relaxation first where a tangent bounds f: a fraction of a millisecond against a search.
		relaxed := false
		for i, n := range sp.nUp {
			if f := sp.fs[sp.of[i]]; !f.exact(n) {
				if !f.relax(n) {
					return false
				}
				relaxed = true
			}
		}
		if relaxed {
			continue
		}
		if sp.late(time.Now()) && (sp.nLo != nil || time.Now().After(sp.grace)) {
			break
		}
		work := sp.work()
		if len(work) == 0 {
			break
		}
		sp.evaluate(work)
	}
	return sp.nLo != nil
}

// searchAt is one branch-and-bound to run: f at n servers to gap.
type searchAt struct {
	f   int
	n   int
	gap float64
}

// work is the searches the knapsack over the bounds asks for: f at each pipeline's n where no search ran yet, at
// coarseGap; when every one has run, those not run to the target gap again at it. The searches that may close the
// most of the gap (weight times bound less point) come first: a deadline may leave the last undone.
func (sp *split) work() []searchAt {
	var first, again []searchAt
	open := map[searchAt]float64{}
	for i, n := range sp.nUp {
		k := sp.of[i]
		up, lo, _ := sp.fs[k].bounds(n)
		var a searchAt
		switch e := sp.fs[k].evals[n]; {
		case e == nil:
			a = searchAt{k, n, max(sp.target, coarseGap)}
			first = appendOnce(first, a)
		case e.gap > sp.target:
			a = searchAt{k, n, sp.target}
			again = appendOnce(again, a)
		default:
			continue
		}
		open[a] += sp.weight[i] * (up[n] - max(lo[n], 0))
	}
	w := again
	if len(first) > 0 {
		w = first
	}
	slices.SortStableFunc(w, func(a, b searchAt) int { return cmp.Compare(open[b], open[a]) })
	return w
}

// appendOnce appends a search not yet in w.
func appendOnce(w []searchAt, a searchAt) []searchAt {
	if slices.Contains(w, a) {
		return w
	}
	return append(w, a)
}

// evaluate runs the searches work, those of one f one after the other (each starts from the points of the last),
// different fs at once on the options' workers; each gets an equal share of the time to the deadline.
func (sp *split) evaluate(work []searchAt) {
	jobs := make([]searchJob, len(work))
	for i, w := range work {
		jobs[i] = searchJob{f: w.f, run: func(limit, grace time.Duration, workers int, store int64) int {
			return sp.fs[w.f].evaluate(w.n, w.gap, limit, grace, workers, store, sp.s.opt)
		}}
	}
	sp.runSearches(sp.s.opt, sp.nLo != nil, jobs)
}

// searchJob is one search of function f: run runs it with a time limit, a first-point grace, workers and a bound on
// its open nodes, and returns its nodes.
type searchJob struct {
	f   int
	run func(limit, grace time.Duration, workers int, store int64) int
}

// runSearches runs jobs, those of one f one after the other (each starts from the points of the last), different fs
// at once on opt's workers; each gets an equal share of the time to the deadline. planned says a plan is known
// already: a search that would end past the deadline is then not started.
func (c *searchClock) runSearches(opt Options, planned bool, jobs []searchJob) {
	byF := map[int][]searchJob{}
	var order []int
	for _, w := range jobs {
		if byF[w.f] == nil {
			order = append(order, w.f)
		}
		byF[w.f] = append(byF[w.f], w)
	}
	workers := opt.workers()
	at := min(workers, len(order)) // searches at once
	each := max(1, workers/at)     // workers per search
	// The searches at once share one search's bound on open nodes: a joint plan's memory stays one solve's.
	store := milp.DefaultMaxStoreBytes / int64(at)
	var limit, grace time.Duration
	if !c.deadline.IsZero() {
		left := max(time.Until(c.deadline), time.Millisecond)
		limit = max(left*time.Duration(at)/time.Duration(len(jobs)), time.Millisecond)
		if !planned {
			grace = max(time.Until(c.grace), 0)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next, started := 0, 0
	for range at {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next == len(order) {
					mu.Unlock()
					return
				}
				k := order[next]
				next++
				mu.Unlock()
				for _, w := range byF[k] {
					mu.Lock()
					late := planned && c.late(time.Now())
					limit := limit
					if c.reshare && !c.deadline.IsZero() {
						// The time the searches before it left unused is shared by those after it.
						left := max(time.Until(c.deadline), time.Millisecond)
						limit = max(left*time.Duration(at)/time.Duration(len(jobs)-started), time.Millisecond)
					}
					started++
					mu.Unlock()
					if late {
						break // it would stop at its root, past the deadline, its work lost
					}
					began := time.Now()
					nodes := w.run(limit, grace, each, store)
					mu.Lock()
					c.nodes += nodes
					c.searches++
					c.searchTime += time.Since(began)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// result is the joint solution of the knapsack over the points found, in the joint MILP's columns, kept as
// solveWith keeps its own (false when it breaks the joint MILP, not expected: the joint MILP then solves it).
func (sp *split) result(parts []*jointPart, class int, left plan.Cluster) (milp.Result, bool, error) {
	return sp.s.keepSplit(parts, class, left, func(i int) []float64 {
		f := sp.fs[sp.of[i]]
		_, _, from := f.bounds(sp.all)
		return f.evals[from[sp.nLo[i]]].x
	}, sp.nodes, sp.up, sp.within)
}

// keepSplit keeps parts at the points of a decomposition, x(i) part i's (its model's columns first), with the nodes
// its searches explored and its bound up on the joint objective, as solveWith keeps the joint MILP's solution: with
// a gap when within says it is not within the target (false when the points break the joint MILP, not expected: the
// joint MILP then solves the step).
func (s *jointSolve) keepSplit(parts []*jointPart, class int, left plan.Cluster, x func(i int) []float64,
	nodes int, up float64, within func(lo, up float64) bool) (milp.Result, bool, error) {
	p, all, err := s.jointMILP(parts, class, left, false)
	if err != nil {
		return milp.Result{}, true, err
	}
	point := make([]float64, p.NumCols())
	for i, pt := range parts {
		copy(point[pt.off:pt.off+pt.m.prob.NumCols()], x(i))
	}
	s.res.Nodes += nodes
	if p.Violation(point) > 1e-6 {
		return milp.Result{}, false, nil
	}
	sol := milp.Result{Status: milp.Optimal, X: point, Objective: p.Value(point), Nodes: nodes}
	sol.Bound = max(up, sol.Objective)
	if !within(sol.Objective, sol.Bound) {
		sol.Status = milp.Limit
		sol.Gap = (sol.Bound - sol.Objective) / max(math.Abs(sol.Objective), 1e-9)
	} else {
		sol.Bound = sol.Objective
	}
	s.kept, s.sol = all, sol
	s.level[class] = sol.Objective
	return sol, true, nil
}

// sameProblem says a and b are one problem, but for their columns' names.
func sameProblem(a, b *milp.Problem) bool {
	if a.Sense != b.Sense || !slices.Equal(a.Obj, b.Obj) || !slices.Equal(a.Lower, b.Lower) ||
		!slices.Equal(a.Upper, b.Upper) || !slices.Equal(a.Integer, b.Integer) ||
		!slices.Equal(a.Priority, b.Priority) || len(a.Rows) != len(b.Rows) {
		return false
	}
	for i, r := range a.Rows {
		q := b.Rows[i]
		if r.Lo != q.Lo || r.Hi != q.Hi || !slices.Equal(r.Terms, q.Terms) {
			return false
		}
	}
	return true
}

// inParallel runs do(0), ..., do(n-1) on up to workers goroutines.
func inParallel(workers, n int, do func(i int)) {
	if workers <= 1 || n <= 1 {
		for i := range n {
			do(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				do(i)
			}
		}()
	}
	wg.Wait()
}
