package milp

import "math/bits"

// heuristicNode says the heuristic runs again at the search's nth node: 32, 128, 512, 2048... On the Loki-like
// three-task tree (pkg/allocate's lokiLike) it found the optimum at node 8 where the search found it at node 256,
// its last; but from nodes 8, 16, 32... it cost the traffic example 15-20% more time over its sweep than it saved.
func heuristicNode(n int) bool {
	return n >= 32 && n&(n-1) == 0 && bits.TrailingZeros(uint(n))%2 == 1
}

// heuristic runs Options.RootHeuristic from node n's LP solution x and accepts the point it returns, and returns x
// padded to the columns the heuristic may have added (then loaded into lp). It holds s.mu; past the root without a
// pricer, where the heuristic adds no columns, it releases it while the heuristic runs.
func (s *search) heuristic(lp *relaxation, n *node, x []float64) []float64 {
	if s.opt.RootHeuristic == nil {
		return x
	}
	before := s.p.NumCols()
	var inc []float64
	best := s.inc
	if s.p.Sense == Maximize {
		best = -best
	}
	if s.opt.Pricer == nil && n.col >= 0 {
		s.mu.Unlock()
		inc = s.opt.RootHeuristic(x, best)
		s.mu.Lock()
	} else {
		inc = s.opt.RootHeuristic(x, best)
		lp.addColumns(before)
		n.extend(s.p)
		s.growPseudoCosts()
	}
	if inc != nil && s.p.Violation(inc) <= 1e-6 {
		s.accept(inc)
	}
	return s.p.pad(x)
}
