// The data plane: frontends, queues, batches, the hop step and the replies.

package sim

import (
	"cmp"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/admission"
	"github.com/sleipnir-serving/sleipnir/pkg/batching"
	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/hop"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// arrive is p's frontend accepting a request: its deadline is the SLO from now, and it goes to the root variant
// the routing picks.
func (s *sim) arrive(p *pipe) {
	sec := int32(s.now / int64(time.Second))
	p.arrivedNow++ // the demand report counts the refused requests too: they are demand
	p.gaps.Note(s.time())
	if int(sec) < len(p.seconds) {
		p.seconds[sec].Arrivals++
	}
	admit := true
	if s.gate != nil {
		admit = s.gate.Decide(admission.Request{Pipeline: p.spec.Name, Class: p.spec.Priority, Now: s.time(),
			Deadline: time.Unix(0, s.now+p.slo)}, p.admit).Admit
	} else {
		_, refused := admission.RefuseUnhosted(p.spec.Name, p.admit) // as a frontend with --admission=false
		admit = !refused
	}
	if !admit {
		if int(sec) < len(p.seconds) {
			p.seconds[sec].Refused++
		}
		return
	}
	r := s.newRequest()
	*r = request{pipe: p, arrival: s.now, due: s.now + p.slo, second: sec, pending: 1}
	s.inFlight++
	v := plan.Pick(p.plan.Routing.Root, s.rng.Float64())
	if p.rootPolicy != nil {
		if c, ok := p.rootPolicy.Choose(queueView{s, p}, p.spec.Root().Name, time.Duration(p.slo)-p.rootRest,
			s.backlog[:]); ok {
			v = c
			p.rootByPolicy++
		}
	} else if p.rootQueue != nil && p.spec.RoutingMode == routing.ModeQueue {
		if c, ok := routing.ChooseByQueue(p.spec.Root().Name, p.rootQueue, queueView{s, p},
			time.Duration(p.slo)-p.rootRest); ok {
			v = c
		}
	}
	h, ok := p.rootIdx[v]
	if !ok { // no root variant hosted: the frontend's publish has nowhere to go
		r.pending = 0
		r.dropped++
		s.finish(r, s.now)
		return
	}
	s.send(p, h, r, 1, 1, 0)
}

// deliver puts a message in its variant's queue, and hands it to an idle replica if there is one.
func (s *sim) deliver(hi int, m *message) {
	h := s.queues[hi]
	h.transit -= float64(m.items)
	m.enqueued = s.now
	h.queue = append(h.queue, m)
	h.load += float64(m.items)
	h.peak = max(h.peak, h.load)
	if n := len(h.free); n > 0 {
		srv := h.free[n-1]
		h.free = h.free[:n-1]
		s.startBatch(int(srv))
	}
}

// takeAll takes the messages in order until one does not fit, and gives that one and those after it (nil when all
// were taken).
func (s *sim) takeAll(ms []*message, take func(*message) bool) []*message {
	for i, m := range ms {
		if !take(m) {
			return ms[i:]
		}
	}
	return nil
}

func (h *variantQueue) pending() int { return len(h.queue) - h.head }

// namedQueue is a variant's queue, by the variant's name.
type namedQueue struct {
	variant string
	queue   int32
}

// childQueue is the queue of variant of the c-th child task.
func (h *variantQueue) childQueue(c int, variant string) int32 {
	for _, q := range h.childQueues[c] {
		if q.variant == variant {
			return q.queue
		}
	}
	panic("sim: no queue for variant " + variant + " of " + h.children[c]) // the plan names the spec's variants
}

// deliver is the queue's first message delivered to a replica.
func (h *variantQueue) deliver() *message {
	h.inService++
	m := h.queue[h.head]
	m.delivered++
	h.queue[h.head] = nil
	h.head++
	if h.head == len(h.queue) {
		h.queue, h.head = h.queue[:0], 0
	} else if h.head >= 64 && h.head*2 >= len(h.queue) { // compacted early: the array stops growing once warm
		n := copy(h.queue, h.queue[h.head:])
		h.queue, h.head = h.queue[:n], 0
	}
	return m
}

// handBack puts messages a server took back at the head of the queue, in order: they did not fit its batch, or it
// carried them and leaves the variant (the live worker naks them, and JetStream delivers them again before newer
// ones).
func (h *variantQueue) handBack(ms []*message) {
	if len(ms) == 0 {
		return
	}
	h.inService -= len(ms)
	if h.head >= len(ms) {
		h.head -= len(ms)
		copy(h.queue[h.head:], ms)
		return
	}
	// Not enough room before the head: the waiting messages move up, in the same array.
	waiting := len(h.queue)
	h.queue = append(h.queue, make([]*message, len(ms)-h.head)...)
	copy(h.queue[len(ms):], h.queue[h.head:waiting])
	copy(h.queue, ms)
	h.head = 0
}

// idle makes a server that has nothing running take work, or wait for it.
func (s *sim) idle(srv int) {
	sv := &s.servers[srv]
	if sv.queue < 0 || sv.busy || sv.swapping {
		return
	}
	if len(sv.carried) > 0 || s.queues[sv.queue].pending() > 0 {
		s.startBatch(srv)
		return
	}
	h := s.queues[sv.queue]
	h.free = append(h.free, int32(srv))
}

// startBatch is the worker's serveOnce up to execution: begin with the messages the last batch carried, else with
// the queue's first, take what the batching rule adds, return what does not fit (back to the head of the queue, or
// carried to the server's next batch: batching.HandBack), drop what the deadline policy drops before executing, and
// execute the rest in model batches.
func (s *sim) startBatch(srv int) {
	sv := &s.servers[srv]
	h := s.queues[sv.queue]
	taken := 0
	limit := 0 // the batch's max batch once it takes an item (gears.MaxBatch: under gears, the smallest of theirs)
	take := func(m *message) bool {
		stage, batch := sv.table.Stage, sv.maxBatch
		if sv.geared != nil {
			th := gears.ItemGear(m.gear, sv.gear)
			stage = sv.geared.For(th).Stage
			batch = gears.MaxBatch(h.pipe.plan, h.pipe.tasks[h.task], h.variant.Name, sv.maxBatch, th)
		}
		if reason := stage.BeforeExecute(s.now, m.req.due, m.enqueued, taken+m.items, h.pending()); reason != "" {
			m.dropped = reason
		} else if l := minSet(limit, batch); batching.Fits(l, taken, m.items) {
			taken += m.items
			limit = l
		} else {
			return false
		}
		sv.batch = append(sv.batch, m)
		return true
	}
	queued := sv.carried
	sv.carried = nil
	if len(queued) == 0 {
		queued = append(s.taken[:0], h.deliver())
	}
	rest := s.takeAll(queued, take)
	if rest == nil {
		more := batching.More(cmp.Or(limit, sv.maxBatch), taken, h.pending())
		queued = s.taken[:0]
		for range more {
			queued = append(queued, h.deliver())
		}
		rest = s.takeAll(queued, take)
	}
	back := 0 // those that go back, compacted in place at the front of rest
	for _, m := range rest {
		if batching.HandBack(m.delivered) {
			rest[back] = m
			back++
		} else {
			sv.carried = append(sv.carried, m)
		}
	}
	h.handBack(rest[:back])
	s.taken = queued[:0] // not cleared: every message stays referenced by s.msgs anyway
	var d time.Duration
	scale := slowdownAt(s.cfg.Slowdown, srv, time.Duration(s.now))
	for c := range batching.Chunks(taken, limit) {
		n := min(limit, taken-c*limit)
		if n > sv.maxBatch {
			h.overPlan++
		}
		b := time.Duration(float64(h.exec.Latency(n)) * scale)
		d += b
		s.measure(srv, h, n, b, d)
	}
	sv.busy = true
	s.push(event{at: s.now + int64(d), kind: evBatchDone, srv: int32(srv)})
}

// batchDone is the worker's forward: each executed item's sub-requests go where the hop step (pkg/hop) routes,
// groups and splits them; leaves and drops are reported to the frontend.
func (s *sim) batchDone(srv int) {
	sv := &s.servers[srv]
	h := s.queues[sv.queue]
	h.inService -= len(sv.batch)
	p := h.pipe
	if sv.gear != nil { // the gear for this batch's items, from the load the replica takes (as a worker's)
		n := 0
		for _, m := range sv.batch {
			n += m.items
		}
		sv.gear.Observe(s.time(), n)
		sv.table = sv.geared.For(sv.gear.Threshold())
	}
	for _, m := range sv.batch {
		r := m.req
		h.load -= float64(m.items)
		if m.dropped != "" {
			if m.node != 0 && deadline.Answers(sv.table.Stage.Policy, m.dropped) { // with its parent's result
				r.degraded += m.items
				r.acc.Add(p.trie.leafWeight(m.node)*float64(m.items)/float64(m.den), p.trie.answered(m.node))
			} else {
				r.dropped += m.items
			}
			s.leaves(r, m.items)
			continue
		}
		p.hopsDone += int64(m.items)
		h.items += uint64(m.items)
		h.messages++
		node := p.trie.child(m.node, sv.queue)
		when := hop.When{Now: s.now, AtTask: time.Duration(s.now - m.enqueued),
			Left: time.Duration(r.due - s.now)}
		for range m.items {
			k := s.emit(h)
			if j := p.joinOf[h.task]; j != nil && k > 0 && !carries(r, p, j) {
				// A part the join does not carry on: a leaf, as the frontend records it (services/frontend).
				r.ok++
				r.acc.Add(p.trie.leafWeight(node)/float64(m.den), p.trie.accuracy(node, p.plan))
				s.leaves(r, 1)
				continue
			}
			out, err := s.step.Step(sv.table, hop.Item{Den: m.den, Children: s.children}, when, s.routeRand)
			if err != nil || k == 0 {
				if err == nil && s.escalate(p, h, sv.table, r, m.den, node, when.Left) {
					continue // still pending, on the cascade's next variant
				}
				if err != nil { // a failed leaf
					r.dropped++
				} else {
					r.ok++
					r.acc.Add(p.trie.leafWeight(node)/float64(m.den), p.trie.accuracyAt(node, p.plan,
						p.tasks[h.task], leafGear(sv, m)))
				}
				s.leaves(r, 1)
				continue
			}
			r.pending += k - 1
			for _, d := range out.Drops {
				if d.Degraded { // answered with this item's result
					r.degraded++
					r.acc.Add(p.trie.leafWeight(node)/float64(out.Den), p.trie.answered(node))
				} else {
					r.dropped++
				}
				s.leaves(r, 1)
			}
			for _, msg := range out.Messages {
				s.send(p, h.childQueue(msg.Child, msg.Variant), r, len(msg.Subs), out.Den, node)
			}
		}
	}
	for _, m := range sv.batch { // done with: their items went on or were answered
		s.freeMsgs = append(s.freeMsgs, m.id)
	}
	sv.batch = sv.batch[:0] // not cleared: every message stays referenced by s.msgs
	sv.busy = false
	if sv.next != nil {
		a := *sv.next
		sv.next = nil
		s.take(srv, a)
		return
	}
	s.idle(srv)
}

// emit draws one executed item's sub-requests into s.children (the child of each, as an index in h.children) and
// their routing draws, as the emulated executor emits them (pkg/executor/emulated): every parallel child its own
// copies, then the shared fan-out's, each to one child by the shares. It returns how many.
func (s *sim) emit(h *variantQueue) int {
	s.children, s.routeDraws.next, s.routeDraws.draws = s.children[:0], 0, s.routeDraws.draws[:0]
	add := func(c int) {
		h.emitted[c]++
		s.children = append(s.children, c)
		s.routeDraws.draws = append(s.routeDraws.draws, s.rng.Uint64(), s.rng.Uint64())
	}
	for i, c := range h.exec.Parallel() {
		for range h.exec.Copies(s.rng, i) {
			add(c)
		}
	}
	for range s.subRequests(h) {
		add(h.exec.ChildOf(s.rng.Float64()))
	}
	h.subs.CountSubRequests(len(s.children)) // the plan check's distribution of sub-requests
	return len(s.children)
}

// carries counts a part of r's join j reaching the frontend, and says whether it is the one that goes on to j as the
// joined item: the first under mode any, else the last of its parents' parts (a window is taken as all of them). A
// part that never comes (dropped on the way) leaves the others as leaves, and the request partial, as live.
func carries(r *request, p *pipe, j *pipeline.Task) bool {
	if r.parts == nil {
		r.parts = make([]uint8, len(p.joinIdx))
	}
	i := p.joinIdx[j.Name]
	r.parts[i]++
	if j.Join.Mode == pipeline.JoinAny {
		return r.parts[i] == 1
	}
	return int(r.parts[i]) == len(p.spec.Parents(j.Name))
}

// replay is a rand.Source that gives back draws taken before. The hop step routes an item's sub-requests after
// they are all known, where the simulator drew each one's child task and then its two routing draws in turn: taking
// the routing draws in that order and replaying them keeps the simulator's random stream, and so its runs, as they
// were before the hop step was shared.
type replay struct {
	draws []uint64
	next  int
}

func (r *replay) Uint64() uint64 {
	r.next++
	return r.draws[r.next-1]
}

// leaves records that n items of r finished or were dropped.
func (s *sim) leaves(r *request, n int) {
	r.pending -= n
	if r.pending == 0 {
		s.finish(r, s.now+r.pipe.comm)
	}
}

// finish records a request's reply: late when its last leaf reached the frontend after the deadline (the frontend
// replied at the deadline with what it had).
func (s *sim) finish(r *request, at int64) {
	s.inFlight--
	r.replied = at
	status := completion.StatusDegraded(at > r.due, r.ok, r.degraded, r.dropped, 0)
	if s.gate != nil {
		s.gate.Done(r.pipe.spec.Name, time.Unix(0, r.arrival), time.Unix(0, at), admission.OutcomeOf(status))
	}
	s.freeReqs = append(s.freeReqs, r) // no message of it is left: it is not read again
	if int(r.second) >= len(r.pipe.seconds) {
		return
	}
	sec := &r.pipe.seconds[r.second]
	switch status {
	case wire.StatusOK:
		sec.OK++
		sec.AccuracySum += r.acc.Value()
	case wire.StatusPartial:
		sec.Partial++
		sec.AccuracySum += r.acc.Value()
	case wire.StatusDegraded:
		sec.Degraded++
		sec.AccuracySum += r.acc.Value()
	case wire.StatusLate:
		sec.Late++
	default:
		sec.Dropped++
	}
}

func (s *sim) time() time.Time { return time.Unix(0, s.now) }

// send is a new message of items of r (each 1/den of it, on path node) delivered to p's variant queue to a hop
// later: in p's deliveries, not the heap (sim.next).
func (s *sim) send(p *pipe, to int32, r *request, items int, den uint64, node int32) *message {
	m := s.newMessage()
	// Field by field: a whole-struct copy of a message (it holds pointers) was a bulk write barrier under GC.
	m.req, m.items, m.den, m.node, m.enqueued, m.dropped, m.delivered, m.gear = r, items, den, node, 0, "", 0, 0
	s.seq++
	s.queues[to].transit += float64(items) // on its way: in the queue's depth at once (queueView)
	p.sent.push(event{at: s.now + p.comm, seq: s.seq, kind: evDeliver, target: to, msg: s.ref(m)})
	return m
}

// newMessage is a message done with (freeMsgs), or a new one: the per-item path allocates none once warm. The
// caller sets every field but id.
func (s *sim) newMessage() *message {
	n := len(s.freeMsgs)
	if n == 0 {
		return new(message)
	}
	m := s.msgs[s.freeMsgs[n-1]]
	s.freeMsgs = s.freeMsgs[:n-1]
	return m
}

// ref is m's id, for an event; a message sent for the first time is given one.
func (s *sim) ref(m *message) int32 {
	if m.id == 0 {
		m.id = int32(len(s.msgs))
		s.msgs = append(s.msgs, m)
	}
	return m.id
}

// newRequest is a request answered before (freeReqs), or a new one; the caller sets every field.
func (s *sim) newRequest() *request {
	n := len(s.freeReqs)
	if n == 0 {
		return new(request)
	}
	r := s.freeReqs[n-1]
	s.freeReqs[n-1] = nil
	s.freeReqs = s.freeReqs[:n-1]
	return r
}
