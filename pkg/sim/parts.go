package sim

import (
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// eventHeap is a binary min-heap of events by time, then by the order they were pushed (so runs are
// deterministic). Written out rather than through container/heap to avoid boxing every event.
type eventHeap struct{ ev []event }

func (h *eventHeap) len() int { return len(h.ev) }

func less(a, b *event) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }

func (h *eventHeap) push(e event) {
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&h.ev[i], &h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev[n] = event{}
	h.ev = h.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && less(&h.ev[r], &h.ev[l]) {
			c = r
		}
		if !less(&h.ev[c], &h.ev[i]) {
			break
		}
		h.ev[i], h.ev[c] = h.ev[c], h.ev[i]
		i = c
	}
	return top
}

// pathTrie numbers the paths of variants from the root (node 0 is the empty path) and caches each one's end-to-end
// accuracy (spec.PathAccuracyOf), so an item carries a node number instead of its path.
type pathTrie struct {
	spec   *pipeline.Spec
	queues []*variantQueue
	next   [][]int32 // node -> variant queue -> child node (0: not yet numbered)
	path   [][]string
	acc    []float64
	known  []bool
}

func newPathTrie(spec *pipeline.Spec, queues []*variantQueue) pathTrie {
	t := pathTrie{spec: spec, queues: queues}
	t.add(nil)
	return t
}

func (t *pathTrie) add(path []string) int32 {
	t.next = append(t.next, make([]int32, len(t.queues)))
	t.path = append(t.path, path)
	t.acc = append(t.acc, 0)
	t.known = append(t.known, false)
	return int32(len(t.next) - 1)
}

// child is the node of node's path followed by variant queue h.
func (t *pathTrie) child(node int32, h int32) int32 {
	if c := t.next[node][h]; c != 0 {
		return c
	}
	p := append(append([]string(nil), t.path[node]...), t.queues[h].name)
	c := t.add(p)
	t.next[node][h] = c
	return c
}

// accuracy is the end-to-end accuracy of a root-to-leaf path under plan p (its cascades' levels, uncached).
func (t *pathTrie) accuracy(node int32, p *plan.Plan) float64 {
	if p != nil && len(p.Cascades) > 0 {
		return p.LeafAccuracy(t.spec, t.path[node])
	}
	if !t.known[node] {
		t.acc[node], t.known[node] = t.spec.PathAccuracyOf(t.path[node]), true
	}
	return t.acc[node]
}
