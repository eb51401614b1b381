package milp

import (
	"math"
	"testing"
)

// TestStoreBoundStopsTheSearch: a search whose open nodes outgrow Options.MaxStoreBytes stops there, as at a node
// limit: status Limit, the best point found with a proven gap, StoreFull set; and with the default bound the same
// problem is proven optimal, the store having held what it reports.
func TestStoreBoundStopsTheSearch(t *testing.T) {
	p := packing(3, 40, 6)
	full, err := Solve(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if full.Status != Optimal || full.StoreFull || full.PeakStoreBytes <= 0 {
		t.Fatalf("default bound: status %s, store full %v, peak %d bytes after %d nodes", full.Status, full.StoreFull,
			full.PeakStoreBytes, full.Nodes)
	}
	if full.Nodes < 50 {
		t.Fatalf("the problem took %d nodes: too few to fill a store", full.Nodes)
	}
	bounded, err := Solve(p, Options{MaxStoreBytes: full.PeakStoreBytes / 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes, peak store %d bytes; bounded at a quarter: %d nodes, status %s, gap %.3g", full.Nodes,
		full.PeakStoreBytes, bounded.Nodes, bounded.Status, bounded.Gap)
	if !bounded.StoreFull || bounded.Status != Limit || bounded.Nodes >= full.Nodes {
		t.Fatalf("bounded: store full %v, status %s, %d nodes (unbounded %d)", bounded.StoreFull, bounded.Status,
			bounded.Nodes, full.Nodes)
	}
	if bounded.X != nil && (bounded.Objective > full.Objective+1e-6 || bounded.Bound < full.Objective-1e-6) {
		t.Fatalf("bounded: point %v and bound %v do not bracket the optimum %v", bounded.Objective, bounded.Bound,
			full.Objective)
	}
}

// TestMaterialiseRebuildsWhatWasRecorded: bounds and bases recorded as changes down a chain (a node, its child, a
// column added between them as a pricer adds one) come back whole, and a released chain gives back its bytes.
func TestMaterialiseRebuildsWhatWasRecorded(t *testing.T) {
	p := &Problem{Sense: Minimize}
	for j := range 3 {
		p.AddCol("x", 1, 0, float64(5+j), true, 0)
	}
	p.AddRow("r0", 1, math.Inf(1), Term{0, 1}, Term{1, 1})
	p.AddRow("r1", math.Inf(-1), 8, Term{1, 1}, Term{2, 1})
	s := &search{p: p, rows: len(p.Rows)}

	root := &node{}
	if b := s.materialise(root); b != nil {
		t.Fatalf("the root has basis %v, want none", b)
	}
	rootLo, rootUp := append([]float64(nil), root.lo...), append([]float64(nil), root.up...)
	root.up[2] = 3 // propagation tightened it
	b1 := []byte{1, 3, 2, 1, 3}
	d1 := s.record(root, rootLo, rootUp, nil, b1)
	child := &node{at: s.newDelta(d1, []boundChange{{col: 0, lo: 2, up: 5}}, nil, nil)}
	s.release(d1)

	start := s.materialise(child)
	if string(start) != string(b1) {
		t.Fatalf("child's start basis %v, want %v", start, b1)
	}
	if want := []float64{2, 0, 0}; !equalFloats(child.lo, want) {
		t.Fatalf("child's lower bounds %v, want %v", child.lo, want)
	}
	if want := []float64{5, 6, 3}; !equalFloats(child.up, want) {
		t.Fatalf("child's upper bounds %v, want %v", child.up, want)
	}

	// A column added (by a pricer) while the child is processed; its LP ends at basis b2, one column longer.
	p.AddCol("x", 1, 0, 9, true, 0)
	lo0, up0 := append([]float64(nil), child.lo...), append([]float64(nil), child.up...)
	child.lo, child.up = append(child.lo, 0), append(child.up, 9)
	child.up[3] = 4
	b2 := []byte{3, 3, 2, 1, 1, 1}
	d2 := s.record(child, lo0, up0, start, b2)
	grandchild := &node{at: s.newDelta(d2, nil, nil, nil)}
	s.release(d2)
	s.release(child.at)

	if got := s.materialise(grandchild); string(got) != string(b2) {
		t.Fatalf("grandchild's start basis %v, want %v", got, b2)
	}
	if want := []float64{2, 0, 0, 0}; !equalFloats(grandchild.lo, want) {
		t.Fatalf("grandchild's lower bounds %v, want %v", grandchild.lo, want)
	}
	if want := []float64{5, 6, 3, 4}; !equalFloats(grandchild.up, want) {
		t.Fatalf("grandchild's upper bounds %v, want %v", grandchild.up, want)
	}
	if s.storeBytes <= 0 {
		t.Fatalf("the store holds %d bytes with a node open", s.storeBytes)
	}
	s.release(grandchild.at)
	if s.storeBytes != 0 {
		t.Fatalf("the store holds %d bytes with no node open, want 0", s.storeBytes)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
