package milp

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// Status is how a solve ended.
type Status string

// Statuses.
const (
	// Optimal: X is optimal within the gap tolerances.
	Optimal Status = "optimal"
	// Infeasible: no point satisfies the constraints.
	Infeasible Status = "infeasible"
	// Limit: the solve stopped at a node or time limit (or an LP Clp could not solve); X, if any, is the best point
	// found, and Gap says how far from optimal it may be.
	Limit Status = "limit"
)

// Options tune a solve. The zero value is usable.
type Options struct {
	// RelGap and AbsGap are the optimality tolerances: the solve stops when the best bound is within
	// max(AbsGap, RelGap*|incumbent|) of the incumbent. Defaults 1e-6 and 1e-9.
	RelGap, AbsGap float64
	// IntegralObjective says the objective takes integer values at every feasible point (e.g. a count of servers),
	// so a node whose bound cannot improve the incumbent by a whole unit is pruned.
	IntegralObjective bool
	// NoStrongBranching chooses the columns to branch on by pseudo-costs alone: for a search that must be quick
	// rather than small (a heuristic's restricted problem), where the strong-branching LPs cost more than the
	// nodes they save.
	NoStrongBranching bool
	// Workers is how many nodes are solved at once, each worker in a Clp model of its own (default 1; always one
	// with a Pricer). With more than one, the order of the nodes varies from run to run, and so do the node count
	// and, among equally good points, which one is returned.
	Workers int
	// MaxNodes bounds the nodes explored (default 200000); TimeLimit the wall time (0: none).
	MaxNodes  int
	TimeLimit time.Duration
	// FirstPointGrace lets a search that has found no point by TimeLimit go on for up to this much longer, until
	// its first: a caller that must have an answer (a plan) gets one rather than a limit that says nothing of
	// whether a point exists. 0: none.
	FirstPointGrace time.Duration
	// MaxStoreBytes bounds the memory the open nodes hold (store.go; default DefaultMaxStoreBytes): a search that
	// reaches it stops as at a limit, with the best point found and its gap. What a search's memory grows with
	// when it runs long; the rest (the problem, each worker's LP) is fixed at its start.
	MaxStoreBytes int64
	// Incumbent is a known feasible point, a first solution to prune against; ignored if it is not feasible.
	Incumbent []float64
	// RootBasis is a basis to start the root's LP from (nil: Clp's own start), e.g. a ParametricLP's (Basis) at the
	// root's bounds, where the root's LP is then solved in a few pivots; ignored unless it has a status for each
	// column and row.
	RootBasis []byte
	// Cutoff, when UseCutoff is set, is an objective value that only better points are wanted past (by the gap
	// tolerances, as an incumbent of that value would be): the search prunes every node that cannot beat it, and
	// reports Infeasible when no point does. For a sub-problem solved to improve another search's incumbent (a
	// heuristic's), which has no use for the worse points it would otherwise find and prove on its way.
	Cutoff    float64
	UseCutoff bool
	// Pricer makes the search a branch-and-price: after each LP it may append continuous columns to the problem
	// (Problem.AddColumn) whose reduced cost is negative, given the LP's row duals in minimisation form (a column's
	// reduced cost is its minimisation-form objective, the negated objective when maximising, less the sum of its
	// row coefficients times the duals). The LP is solved again until it adds none; then the LP value is the bound
	// of the node over every column the pricer could make. x is the LP's solution: infeasible true says the node
	// has no point (e.g. it still needs an artificial column).
	Pricer func(duals, x []float64) (added int, infeasible bool)
	// RootHeuristic, when set, is given the root's LP solution and the incumbent's objective value (or Cutoff; the
	// worst infinity of the sense when there is neither), and returns a feasible point to start from (nil: none;
	// ignored if it is not feasible, kept only if better), before the search branches. It may add columns to the
	// problem, as the pricer does. It spares a heuristic that starts from the LP relaxation a solve of its own. It
	// is called again with the LP solutions of nodes 32, 128, 512... (their points are accepted when better);
	// without a Pricer, there concurrently with other workers' nodes and then it must add no columns.
	RootHeuristic func(x []float64, incumbent float64) []float64
}

// Result is the outcome of a solve.
type Result struct {
	Status Status
	// X is the best point found (nil if none) and Objective its value.
	X         []float64
	Objective float64
	// Bound is the best bound on the optimum when the solve ended; Gap the relative distance between Objective
	// and Bound (0 when proven optimal).
	Bound float64
	Gap   float64
	Nodes int
	LPs   int
	// Unsolved counts LPs Clp could not solve; when non-zero the result is not proven optimal.
	Unsolved int
	// PeakStoreBytes is the most the open nodes held at once (Options.MaxStoreBytes), and StoreFull says the
	// search stopped at that bound.
	PeakStoreBytes int64
	StoreFull      bool
}

// DefaultMaxStoreBytes is Options.MaxStoreBytes's default: with Go's garbage collector letting the heap grow to
// twice what is live, a process solving one model stays within a few hundred MB.
const DefaultMaxStoreBytes = 128 << 20

type node struct {
	// at is the node's bounds and start basis as changes (store.go; nil: the root's). lo and up are its bounds made
	// whole while a worker processes it, nil before and after.
	at     *delta
	lo, up []float64
	bound  float64 // the parent's LP value (minimisation form): a lower bound on the node's optimum
	depth  int
	// The branching that made the node: column, direction and how far it moved the parent's value (for the
	// pseudo-costs); col < 0 at the root.
	col  int
	up1  bool
	dist float64
	// branch is the bounds the branching gave col (split sets it; process makes the node's delta of it).
	branch boundChange
}

// openNodes is a min-heap on bound, used once an incumbent exists (best-bound search).
type openNodes []*node

func (h openNodes) Len() int           { return len(h) }
func (h openNodes) Less(i, j int) bool { return h[i].bound < h[j].bound }
func (h openNodes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *openNodes) Push(x any)        { *h = append(*h, x.(*node)) }
func (h *openNodes) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	return n
}

const intTol = 1e-6

// Solve finds an optimal point of p by branch-and-bound: depth-first until a first incumbent exists, best-bound
// afterwards; branching on a fractional integer column of the highest priority, chosen by reliability branching
// (see branchColumn); with Options.Workers nodes at once, sharing one tree, incumbent and pseudo-costs.
func Solve(p *Problem, opt Options) (Result, error) {
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if opt.RelGap == 0 {
		opt.RelGap = 1e-6
	}
	if opt.AbsGap == 0 {
		opt.AbsGap = 1e-9
	}
	if opt.MaxNodes == 0 {
		opt.MaxNodes = 200000
	}
	if opt.MaxStoreBytes <= 0 {
		opt.MaxStoreBytes = DefaultMaxStoreBytes
	}
	sign := 1.0
	if p.Sense == Maximize {
		sign = -1
	}
	s := &search{p: p, opt: opt, inc: math.Inf(1), pc: newPseudoCosts(p.NumCols()), rows: len(p.Rows)}
	s.idle = sync.NewCond(&s.mu)
	s.intRows = p.integerRows()
	if opt.UseCutoff {
		s.inc = sign * opt.Cutoff
	}
	if opt.Incumbent != nil && len(opt.Incumbent) <= p.NumCols() && p.Violation(opt.Incumbent) <= 1e-6 {
		s.accept(opt.Incumbent)
	}
	s.start = time.Now()
	root := &node{bound: math.Inf(-1), col: -1}
	s.open = openNodes{root}
	s.best = s.incX != nil // best-bound order (a heap) once an incumbent exists
	workers := max(1, opt.Workers)
	if opt.Pricer != nil {
		workers = 1 // the pricer adds columns to the problem as it goes, which one LP at a time keeps simple
	}
	lps := make([]*relaxation, workers)
	var wg sync.WaitGroup
	for i := range lps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lps[i] = s.work()
		}()
	}
	wg.Wait()
	open, limited := s.open, s.limited
	res := Result{Nodes: s.nodes, Unsolved: s.unsolved, PeakStoreBytes: s.peakStoreBytes, StoreFull: s.storeFull}
	for _, lp := range lps {
		if lp != nil {
			res.LPs += lp.solves
		}
	}
	bound := s.inc
	for _, n := range open {
		if !s.prunable(n.bound) {
			bound = min(bound, n.bound)
		}
	}
	switch {
	case s.incX == nil && !limited && s.unsolved == 0:
		res.Status = Infeasible
		return res, nil
	case s.incX == nil:
		res.Status = Limit
		res.Bound, res.Gap = sign*bound, math.Inf(1)
		return res, nil
	}
	res.X, res.Objective, res.Bound = p.pad(s.incX), sign*s.inc, sign*bound
	res.Gap = max(0, (s.inc-bound)/max(math.Abs(s.inc), 1e-9))
	res.Status = Optimal
	if limited || s.unsolved > 0 {
		if s.prunable(bound) {
			res.Gap = 0
		}
		if res.Gap > 0 || s.unsolved > 0 {
			res.Status = Limit
		}
	}
	if res.Status == Optimal {
		res.Bound, res.Gap = res.Objective, 0
	}
	return res, nil
}

// search is the state of a branch-and-bound shared by its workers; mu guards it, and a worker holds mu except
// while it solves an LP (each worker solves its own copy of the LP relaxation, in a Clp model of its own).
type search struct {
	p   *Problem
	opt Options

	mu       sync.Mutex
	idle     *sync.Cond // signalled when nodes are pushed or a worker finishes one
	open     openNodes
	best     bool // open is a heap in best-bound order (once an incumbent exists); a stack before
	busy     int  // workers processing a node
	limited  bool
	start    time.Time
	inc      float64 // incumbent value, minimisation form
	incX     []float64
	nodes    int
	unsolved int
	pc       *pseudoCosts
	// intRows is the rows of integer columns only, which each node propagates before its LP (not with a pricer:
	// its columns join rows).
	intRows []int
	// rows is the problem's rows (a basis is its columns' statuses, then its rows'); storeBytes what the open
	// nodes hold now (store.go), peakStoreBytes the most they held, storeFull that it reached MaxStoreBytes.
	rows           int
	storeBytes     int64
	peakStoreBytes int64
	storeFull      bool
}

// work is one worker's loop: take the next open node, process it and push its children, until no node is open
// and no worker busy (whose children may yet be pushed), or a limit is reached. It returns the worker's LP (nil if
// it solved none).
func (s *search) work() *relaxation {
	var lp *relaxation
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if len(s.open) == 0 && s.busy == 0 {
			s.idle.Broadcast()
			return lp
		}
		if s.storeBytes > s.opt.MaxStoreBytes {
			s.storeFull = true
		}
		if s.limited || s.storeFull || s.nodes >= s.opt.MaxNodes || s.pastTimeLimit() {
			s.limited = true
			s.idle.Broadcast()
			return lp
		}
		if len(s.open) == 0 {
			s.idle.Wait()
			continue
		}
		if s.incX != nil && !s.best {
			s.best = true
			heap.Init(&s.open)
		}
		var n *node
		if s.best {
			n = heap.Pop(&s.open).(*node)
		} else {
			n = s.open[len(s.open)-1]
			s.open = s.open[:len(s.open)-1]
		}
		if lp == nil {
			lp = newRelaxation(s.p) // after the root, which may have added columns
		}
		s.busy++
		for _, c := range s.process(lp, n) {
			if s.best {
				heap.Push(&s.open, c)
			} else {
				s.open = append(s.open, c)
			}
		}
		s.busy--
		s.idle.Broadcast()
	}
}

// pastTimeLimit says the search has run past its TimeLimit, and its FirstPointGrace when it has found no point.
func (s *search) pastTimeLimit() bool {
	if s.opt.TimeLimit <= 0 {
		return false
	}
	limit := s.opt.TimeLimit
	if s.incX == nil {
		limit += s.opt.FirstPointGrace
	}
	return time.Since(s.start) > limit
}

// prunable says a node whose bound is b cannot improve the incumbent beyond the tolerances.
func (s *search) prunable(b float64) bool {
	if !s.pruning() {
		return false
	}
	if s.opt.IntegralObjective {
		return b > s.inc-1+intTol
	}
	return b >= s.inc-max(s.opt.AbsGap, s.opt.RelGap*math.Abs(s.inc))
}

// pruning says the search has a value to prune against: an incumbent's, or the cutoff.
func (s *search) pruning() bool { return s.incX != nil || s.opt.UseCutoff }

func (s *search) accept(x []float64) {
	x = s.p.pad(append([]float64(nil), x...))
	for j, integer := range s.p.Integer {
		if integer {
			x[j] = math.Round(x[j])
		}
	}
	v := s.p.Value(x)
	if s.p.Sense == Maximize {
		v = -v
	}
	if v < s.inc {
		s.inc, s.incX = v, x
	}
}

// process solves one node in lp and returns its children. It holds s.mu, and releases it while the LP solves.
func (s *search) process(lp *relaxation, n *node) []*node {
	defer s.release(n.at) // what the node started from, once it has made its children's
	if s.prunable(n.bound) {
		return nil
	}
	s.nodes++
	s.mu.Unlock()
	start := s.materialise(n)
	lo0, up0 := append([]float64(nil), n.lo...), append([]float64(nil), n.up...)
	defer func() { n.lo, n.up = nil, nil }()
	if s.opt.Pricer == nil && !s.p.propagate(s.intRows, n.lo, n.up) {
		s.mu.Lock()
		return nil
	}
	// Columns are added only with one worker (a pricer) or at the root (its heuristic), while no other worker has
	// a node: p may be read without the lock.
	from := start
	if n.at == nil && len(s.opt.RootBasis) == s.p.NumCols()+s.rows {
		from = s.opt.RootBasis // the root's delta keeps its basis whole all the same (start is nil)
	}
	st, obj, x := lp.solvePriced(func() ([]float64, []float64) {
		n.extend(s.p)
		return n.lo, n.up
	}, from, s.opt.Pricer)
	var rc []float64
	var b []byte
	if st == lpOptimal {
		rc, b = lp.reducedCosts(), lp.basis()
	}
	s.mu.Lock()
	s.growPseudoCosts()
	switch st {
	case lpInfeasible:
		return nil
	case lpFailed:
		s.unsolved++
		return nil
	}
	if n.col >= 0 && n.dist > 0 && !math.IsInf(n.bound, -1) {
		s.pc.record(n.col, n.up1, max(0, obj-n.bound)/n.dist)
	}
	if n.col < 0 || heuristicNode(s.nodes) {
		// At the root, and again from deeper LPs in long searches: their choices are nearer an optimum's, and the
		// last improvements of an incumbent are otherwise found at the search's end.
		x = s.heuristic(lp, n, x)
	}
	if s.prunable(obj) {
		return nil
	}
	s.fixByReducedCost(n, obj, x, rc)
	col, bounds := s.branchColumn(lp, n, x, obj, b)
	switch col {
	case integral:
		s.accept(x)
		return nil
	case prunedByStrongBranching:
		return nil
	}
	children := split(n, col, x[col], bounds)
	made := s.record(n, lo0, up0, start, b)
	for _, c := range children {
		c.at = s.newDelta(made, []boundChange{c.branch}, nil, nil)
	}
	s.release(made) // held by the children now
	return children
}

// fixByReducedCost tightens the bounds of n's integer columns (which its children inherit) by their reduced costs
// rc at its LP optimum x of value obj: an integer column at its lower bound with reduced cost d > 0 cannot rise by k
// without the LP value rising by at least k*d, so it cannot rise further than the incumbent allows; likewise at
// its upper bound (Nemhauser and Wolsey, 1988). Few columns are fixed at the root of the allocation models; deeper,
// where the bound nears the incumbent, more are: 1.25-2.4x fewer nodes on the traffic example at 400-900 QPS.
func (s *search) fixByReducedCost(n *node, obj float64, x, rc []float64) {
	if !s.pruning() {
		return
	}
	// room is how far the objective may rise and still reach a point the search would keep (prunable's rule).
	room := s.inc - max(s.opt.AbsGap, s.opt.RelGap*math.Abs(s.inc)) - obj
	if s.opt.IntegralObjective {
		room = s.inc - 1 + intTol - obj
	}
	if room < 0 {
		return
	}
	for j, d := range rc {
		if !s.p.Integer[j] || n.lo[j] == n.up[j] {
			continue
		}
		switch {
		case d > rcTol && x[j] <= n.lo[j]+intTol:
			n.up[j] = min(n.up[j], n.lo[j]+math.Floor(room/d+intTol))
		case d < -rcTol && x[j] >= n.up[j]-intTol:
			n.lo[j] = max(n.lo[j], n.up[j]-math.Floor(room/-d+intTol))
		}
	}
}

// rcTol is the least reduced cost that fixes a column: below it, Clp's own tolerances blur the sign.
const rcTol = 1e-7

// extend gives node n the bounds of the columns added to p since it was made.
func (n *node) extend(p *Problem) {
	for j := len(n.lo); j < p.NumCols(); j++ {
		n.lo, n.up = append(n.lo, p.Lower[j]), append(n.up, p.Upper[j])
	}
}
