package sim

import (
	"maps"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// eventHeap is a 4-ary min-heap of events by time, then by the order they were pushed (so runs are deterministic:
// no two events compare equal, so any heap pops them in the same order). Written out rather than through
// container/heap to avoid boxing every event; four children a node make it half as deep as a binary heap, and pop,
// which walks down it, is most of its cost.
type eventHeap struct{ ev []event }

func (h *eventHeap) len() int { return len(h.ev) }

func less(a, b *event) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }

func (h *eventHeap) push(e event) {
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1 // a hole the parents later than e move down into, e put in last (not swapped up)
	for i > 0 {
		p := (i - 1) / 4
		if !less(&e, &h.ev[p]) {
			break
		}
		h.ev[i] = h.ev[p]
		i = p
	}
	h.ev[i] = e
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	last := h.ev[n]
	h.ev = h.ev[:n]
	if n == 0 {
		return top
	}
	i := 0 // a hole at the root the earliest child moves up into, down to where the last event goes
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		c := first
		for k := first + 1; k < min(first+4, n); k++ {
			if less(&h.ev[k], &h.ev[c]) {
				c = k
			}
		}
		if !less(&h.ev[c], &last) {
			break
		}
		h.ev[i] = h.ev[c]
		i = c
	}
	h.ev[i] = last
	return top
}

// deliveries are one pipeline's messages sent and not yet delivered, in the order they are due: each is due one
// hop (the pipeline's constant latency) after it was sent, and the simulated time never goes back, so they are
// due in the order sent and a queue holds them in order. Half the events are deliveries: they skip the heap.
type deliveries struct {
	ev   []event
	head int
}

func (d *deliveries) len() int { return len(d.ev) - d.head }

func (d *deliveries) push(e event) {
	if d.head == len(d.ev) { // emptied: start again at the front
		d.ev, d.head = d.ev[:0], 0
	} else if d.head >= 64 && 2*d.head >= len(d.ev) { // compacted early: the array stops growing once warm
		n := copy(d.ev, d.ev[d.head:])
		d.ev, d.head = d.ev[:n], 0
	}
	d.ev = append(d.ev, e)
}

// peek is the event due first, in the heap or a pipeline's deliveries (nil: none), and the deliveries it is
// first of (nil: the heap's).
func (s *sim) peek() (*event, *deliveries) {
	var first *event
	if s.events.len() > 0 {
		first = &s.events.ev[0]
	}
	var from *deliveries
	for _, p := range s.pipes {
		if d := &p.sent; d.len() > 0 && (first == nil || less(&d.ev[d.head], first)) {
			first, from = &d.ev[d.head], d
		}
	}
	return first, from
}

// next takes the event due first, and makes its time now; false when none is left.
func (s *sim) next() (event, bool) {
	first, from := s.peek()
	if first == nil {
		return event{}, false
	}
	var e event
	if from == nil {
		e = s.events.pop()
	} else {
		e = *first
		from.head++
	}
	s.now = e.at
	return e, true
}

// pathTrie numbers the paths of variants from the root (node 0 is the empty path) and caches each one's end-to-end
// accuracy (spec.PathAccuracyOf), so an item carries a node number instead of its path.
type pathTrie struct {
	spec   *pipeline.Spec
	queues []*variantQueue
	next   [][]int32 // node -> variant queue -> child node (0: not yet numbered)
	path   [][]string
	acc    []float64
	weight []float64 // spec.LeafWeight of the path, once known
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
	t.weight = append(t.weight, 0)
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

// answered is the accuracy of an answer degraded to node's path (spec.AnsweredAccuracyOf).
func (t *pathTrie) answered(node int32) float64 {
	return t.spec.AnsweredAccuracyOf(t.path[node])
}

// accuracy is the end-to-end accuracy of a root-to-leaf path under plan p (its cascades' levels, uncached).
func (t *pathTrie) accuracy(node int32, p *plan.Plan) float64 {
	if p != nil && len(p.Cascades) > 0 {
		return p.LeafAccuracy(t.spec, t.path[node])
	}
	t.know(node)
	return t.acc[node]
}

// accuracyAt is accuracy with the cascade of task at threshold gear, the one its item ran at (0: the plan's).
func (t *pathTrie) accuracyAt(node int32, p *plan.Plan, task string, gear float64) float64 {
	if gear <= 0 || p == nil {
		return t.accuracy(node, p)
	}
	th := maps.Clone(p.Cascades)
	if th == nil { // the plan in force runs no cascade now; the item ran this one
		th = map[string]float64{}
	}
	th[task] = gear
	return t.spec.CascadePathAccuracy(t.path[node], th)
}

// leafWeight is what a leaf on node's path weighs in its request's accuracy over its completion share
// (spec.LeafWeight: its branches' weights).
func (t *pathTrie) leafWeight(node int32) float64 {
	t.know(node)
	return t.weight[node]
}

func (t *pathTrie) know(node int32) {
	if !t.known[node] {
		t.acc[node], t.weight[node] = t.spec.PathAccuracyOf(t.path[node]), t.spec.LeafWeight(t.path[node])
		t.known[node] = true
	}
}

// run handles the events in order until none is left.
func (s *sim) run() {
	nextProgress := int64(time.Minute)
	for {
		e, ok := s.next()
		if !ok {
			break
		}
		if s.cfg.Progress != nil && s.now >= nextProgress {
			s.cfg.Progress(time.Duration(min(s.now, s.end)), time.Duration(s.end))
			nextProgress += int64(time.Minute)
		}
		s.handle(e)
	}
	if s.cfg.Progress != nil {
		s.cfg.Progress(time.Duration(s.end), time.Duration(s.end))
	}
}

// handle is one event, at its time (s.now).
func (s *sim) handle(e event) {
	switch e.kind {
	case evArrival:
		p := s.pipes[e.target]
		s.arrive(p)
		if at, ok := p.arr.Next(); ok {
			s.push(event{at: int64(at), kind: evArrival, target: e.target})
		}
	case evDeliver:
		s.deliver(int(e.target), s.msgs[e.msg])
	case evBatchDone:
		s.batchDone(int(e.srv))
	case evSwapDone:
		if sv := &s.servers[e.srv]; sv.swapping && sv.swapEnd == s.now {
			sv.swapping = false
			s.idle(int(e.srv))
		}
	case evTune:
		s.tuneLook()
		if s.now < s.end || s.inFlight > 0 && s.now < s.end+int64(time.Minute) {
			s.push(event{at: s.now + int64(s.core.TuneEvery()), kind: evTune})
		}
	case evTick:
		s.tick()
		// Ticks go on past the workload while requests are in flight, so the loop keeps serving them.
		if s.now < s.end || s.inFlight > 0 && s.now < s.end+int64(time.Minute) {
			s.push(event{at: s.now + int64(time.Second), kind: evTick})
		}
	}
}
