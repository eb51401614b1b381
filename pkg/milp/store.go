package milp

// The open nodes' store. A node waiting in the tree needs its column bounds and its parent's optimal basis (its
// LP's start); held whole, that is 17 bytes a column and one a row per node, and a joint plan of 10 pipelines on 200
// servers (about 10,000 columns) reached 160 KB a node and 6 GB within two minutes. So a node holds them as what
// changed: each processed node leaves a delta (the bounds its propagation and reduced costs tightened, and the basis
// statuses its LP changed) chained to the delta it started from, and each child adds its branch. Siblings share
// their parent's delta, and a delta lives while an open node below it does. A node is made whole again when a
// worker takes it (materialise), in O(changes along its path + columns).

// boundChange is one column's bounds.
type boundChange struct {
	col    int32
	lo, up float64
}

// statusChange is one basis status: of column idx, or of row -1-idx.
type statusChange struct {
	idx    int32
	status byte
}

// delta is a node's bounds and start basis as changes from its parent delta's; nil stands for the problem's own
// bounds and no basis. Read-only once made, but for refs (guarded by the search's mu).
type delta struct {
	parent *delta
	bounds []boundChange
	basis  []statusChange
	// base is a whole basis, columns then rows (the root's): the changes below apply to it.
	base []byte
	// refs counts its holders: the node it was made for, or the deltas made on it; at zero it is released, and its
	// bytes with it.
	refs  int
	bytes int64
}

// Sizes of what a delta holds, for the store's count of its bytes (Options.MaxStoreBytes).
const (
	deltaOverhead     = 96
	boundChangeBytes  = 24
	statusChangeBytes = 8
)

// newDelta makes a delta on parent, held once by its maker (release drops it), and counts it in the store.
func (s *search) newDelta(parent *delta, bounds []boundChange, basis []statusChange, base []byte) *delta {
	d := &delta{parent: parent, bounds: bounds, basis: basis, base: base, refs: 1,
		bytes: deltaOverhead + int64(len(bounds))*boundChangeBytes + int64(len(basis))*statusChangeBytes +
			int64(len(base))}
	if parent != nil {
		parent.refs++
	}
	s.storeBytes += d.bytes
	s.peakStoreBytes = max(s.peakStoreBytes, s.storeBytes)
	return d
}

// release drops one reference to d, and d with its bytes when it was the last, then its parent's likewise.
func (s *search) release(d *delta) {
	for d != nil {
		d.refs--
		if d.refs > 0 {
			return
		}
		s.storeBytes -= d.bytes
		d, d.parent = d.parent, nil
	}
}

// materialise gives node n its bounds (and returns its start basis, nil when it has none) from its delta chain: the
// problem's bounds, with every column added since, and the changes applied from the root down.
func (s *search) materialise(n *node) (start []byte) {
	p := s.p
	n.lo = append(n.lo[:0], p.Lower...)
	n.up = append(n.up[:0], p.Upper...)
	var chain []*delta
	for d := n.at; d != nil; d = d.parent {
		chain = append(chain, d)
	}
	var cols, rows []byte
	for i := len(chain) - 1; i >= 0; i-- {
		d := chain[i]
		for _, c := range d.bounds {
			n.lo[c.col], n.up[c.col] = c.lo, c.up
		}
		if d.base != nil {
			cols = append([]byte(nil), d.base[:len(d.base)-s.rows]...)
			rows = append([]byte(nil), d.base[len(d.base)-s.rows:]...)
		}
		for _, c := range d.basis {
			if c.idx < 0 {
				rows[-1-c.idx] = c.status
				continue
			}
			for int(c.idx) >= len(cols) { // a column added after the basis above was taken (relaxation.widen's rule)
				cols = append(cols, atLowerBound)
			}
			cols[c.idx] = c.status
		}
	}
	if rows == nil {
		return nil
	}
	return append(cols, rows...)
}

// record makes the delta node n leaves its children: the bounds it ended with against those it started with (lo0,
// up0: what materialise gave it; columns added since start at the problem's own), and its LP's optimal basis b
// against its start basis b0 (nil: none; b is then kept whole).
func (s *search) record(n *node, lo0, up0 []float64, b0, b []byte) *delta {
	var bounds []boundChange
	for j := range n.lo {
		l, u := s.p.Lower[j], s.p.Upper[j]
		if j < len(lo0) {
			l, u = lo0[j], up0[j]
		}
		if n.lo[j] != l || n.up[j] != u {
			bounds = append(bounds, boundChange{col: int32(j), lo: n.lo[j], up: n.up[j]})
		}
	}
	if b0 == nil || b == nil {
		return s.newDelta(n.at, bounds, nil, b)
	}
	var basis []statusChange
	cols := len(b) - s.rows
	cols0 := len(b0) - s.rows
	for j := 0; j < cols; j++ {
		was := byte(atLowerBound)
		if j < cols0 {
			was = b0[j]
		}
		if b[j] != was {
			basis = append(basis, statusChange{idx: int32(j), status: b[j]})
		}
	}
	for i := 0; i < s.rows; i++ {
		if b[cols+i] != b0[cols0+i] {
			basis = append(basis, statusChange{idx: int32(-1 - i), status: b[cols+i]})
		}
	}
	return s.newDelta(n.at, bounds, basis, nil)
}
