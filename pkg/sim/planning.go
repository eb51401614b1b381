// The planner's side: the reports and heartbeats the planning core hears, what it decides, and the workers
// following it.

package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/admission"
	"github.com/sleipnir-serving/sleipnir/pkg/core"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/hop"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// tick is one second: each frontend's demand report and the workers' heartbeats go to the planning core, whose
// tick decides what the planner would publish; the simulator publishes it at once, moves the retired queues, and
// takes the second's sample.
func (s *sim) tick() {
	now := s.time()
	for _, p := range s.pipes {
		r := wire.DemandReport{Frontend: "frontend", Count: p.arrivedNow, IntervalMs: 1000, GapsMs: p.gaps.Take()}
		if _, err := s.core.Report(p.spec.Name, r, now); err != nil {
			panic(fmt.Sprintf("sim: demand report refused: %v", err)) // the simulator's own counts: a bug
		}
		p.arrivedNow = 0
	}
	s.heartbeats(now)
	t0 := time.Now()
	decisions := s.core.Tick(now, s.cluster)
	s.planWall += time.Since(t0)
	replanned := false
	for i, d := range decisions {
		p := s.pipes[i]
		if d.Plan != nil {
			s.core.Published(d, now, s.cluster)
			s.applyPlan(p, d.Plan, d.Replanned)
			if d.Replanned {
				p.replans++
				p.noteCheck(d.Plan)
				replanned = true
			}
		}
	}
	if replanned {
		s.assignWorkers()
	}
	active := s.inUse()
	for i, p := range s.pipes {
		s.rehome(p, nil)
		if sec := s.now/int64(time.Second) - 1; sec >= 0 && int(sec) < len(p.seconds) {
			x := &p.seconds[sec]
			u := active[p.spec.Name]
			x.ActiveServers, x.ActiveByClass, x.CostPerHour = u.servers, u.byClass, u.cost
			x.EstimateQPS, x.Mode, x.Epoch = decisions[i].Observed.Demand, p.plan.Mode, p.plan.Epoch
			x.DemandQPS = p.work.RateAt(time.Duration(sec) * time.Second)
		}
	}
}

// heartbeats are the workers' heartbeats: the counters of every variant that executed anything, as one worker's
// (the core folds what is new since the previous one), and each server's measured latencies. The core copies what
// it keeps of a heartbeat, so the counters' beat is built in maps reused tick after tick.
func (s *sim) heartbeats(now time.Time) {
	if s.beat == nil {
		s.beat = map[string]wire.Observed{}
	}
	for _, h := range s.queues {
		if h.items > 0 {
			if h.emittedBy == nil {
				h.emittedBy = make(map[string]uint64, len(h.children))
			}
			for c, n := range h.emitted {
				if n > 0 {
					h.emittedBy[h.children[c]] = n
				}
			}
			s.beat[h.key] = wire.Observed{FanoutCounts: wire.FanoutCounts{Items: h.items,
				Children: h.emittedBy, SubRequests: h.subs.SubRequests,
				Escalated: h.subs.Escalated}, Messages: h.messages}
		}
	}
	s.core.Heartbeat("workers", wire.Registration{Observed: s.beat}, now)
	for i := range s.servers {
		if s.servers[i].measured != nil {
			s.core.Latencies(s.names[i], s.latencies(i, now), now)
		}
	}
}

// applyPlan makes a plan of p published the one its frontend and workers follow; the caller reassigns the workers
// after a new allocation (assignWorkers).
func (s *sim) applyPlan(p *pipe, pl *plan.Plan, replanned bool) {
	p.plan = pl
	spare := plan.SpareOfAll(func(yield func(*plan.Plan) bool) {
		for _, q := range s.pipes {
			if !yield(q.plan) {
				return
			}
		}
	})
	for _, q := range s.pipes { // the ceiling of every pipeline's gate reads the spare servers of all plans
		if q.plan != nil {
			q.admit = admission.Of(q.spec, q.plan, q.plan.Reach(spare))
		}
	}
	if routing.ReadsQueues(p.spec.RoutingMode) {
		p.rootQueue = routing.QueueOptions(p.spec, pl, p.spec.Root().Name)
		p.rootRest = deadline.RestBelow(p.spec, pl, p.spec.Root().Name)
	}
	p.rootPolicy = nil
	if p.spec.RoutingMode == routing.ModeRAMSIS {
		// The policies are computed here, as a worker does when it reads a plan, and cached (pkg/ramsis): its
		// servers' tables (follow) find them there.
		ch, err := ramsis.For(p.spec, pl, p.spec.Root().Name, time.Now)
		if err != nil {
			s.policyErr = errors.Join(s.policyErr, err)
		}
		p.rootPolicy = ch
	}
	for _, h := range s.queues {
		if h.pipe != p {
			continue
		}
		h.budget = 0
		if vp := pl.Find(p.tasks[h.task], h.variant.Name); vp != nil {
			h.budget = time.Duration(vp.BudgetMs * float64(time.Millisecond))
		}
	}
	for i := range s.servers {
		if sv := &s.servers[i]; sv.queue >= 0 && s.queues[sv.queue].pipe == p {
			s.follow(i)
		}
	}
}

// follow rebuilds server srv's forwarding and deadline stage under its pipeline's plan in force, as a worker does
// when it reads a new plan.
func (s *sim) follow(srv int) {
	sv := &s.servers[srv]
	if sv.queue < 0 {
		sv.table = nil
		return
	}
	h := s.queues[sv.queue]
	p := h.pipe
	sv.table = hop.ForReplica(p.spec, p.plan, p.system.Policy, p.tasks[h.task], h.variant.Name, h.budget,
		h.children)
	prepare := func(t *hop.Table) {
		if routing.ReadsQueues(p.spec.RoutingMode) {
			t.Queues = queueView{s, p}
		}
		if _, err := t.UsePolicies(p.spec, p.plan, time.Now); err != nil {
			s.policyErr = errors.Join(s.policyErr, err)
		}
	}
	prepare(sv.table)
	sv.geared = nil
	if len(p.plan.Gears[p.tasks[h.task]]) > 0 {
		sv.geared = hop.NewGeared(sv.table, p.spec, p.plan, p.system.Policy, p.tasks[h.task], h.variant.Name,
			h.budget, h.children, prepare)
	}
	if sv.gear = gears.Follow(sv.gear, p.spec, p.plan, p.tasks[h.task], h.variant.Name); sv.gear != nil {
		sv.table = sv.geared.For(sv.gear.Threshold())
	}
}

// queueView is the queues' state for queue-aware routing: the simulator knows it exactly (the items waiting, in
// service or on their way to each variant), where a live worker measures it.
type queueView struct {
	s *sim
	p *pipe
}

// Reading changes with every message sent: the depths hold it at once (the hop step counts only what one item's
// step sends, before its messages go).
func (q queueView) Reading() uint64 { return q.s.seq }

func (q queueView) Depth(task, variant string) (float64, bool) {
	h, ok := q.p.queueIdx[task][variant]
	if !ok {
		return 0, false
	}
	return q.s.queues[h].load + q.s.queues[h].transit, true
}

// tuneLook is the tuner's look at the queues, as the planner's: the core sees each hosted variant's messages
// waiting or in service, and the simulator moves and reassigns what it decides.
func (s *sim) tuneLook() {
	if s.looks == nil {
		s.looks = make(map[string]map[string]float64, len(s.pipes))
	}
	for _, p := range s.pipes {
		q := s.looks[p.spec.Name] // the core keeps it till the next look, which refills it
		if q == nil {
			q = map[string]float64{}
			s.looks[p.spec.Name] = q
		}
		clear(q)
		if p.hostedFor != p.plan { // the plan's variants' queues, worked out once per plan
			p.hosted, p.hostedFor = p.hosted[:0], p.plan
			for _, vp := range p.plan.Variants {
				p.hosted = append(p.hosted, p.queueIdx[vp.Task][vp.Variant])
			}
		}
		for _, hi := range p.hosted {
			h := s.queues[hi]
			q[h.name] = float64(h.pending() + h.inService)
		}
	}
	looked := s.core.Look(s.time(), s.cluster, s.looks)
	for _, cp := range looked.Rehome {
		s.rehome(s.named[cp.Spec.Name], cp)
	}
	if looked.Loans {
		s.assignWorkers()
	}
}

// assignWorkers gives the plans' replicas and the tuner's loans to the workers (the core's Assign, as the
// planner's), moving as few as it can.
func (s *sim) assignWorkers() {
	next, _ := s.core.Assign(s.names, s.classes, s.assign)
	s.assign = next
	for i, name := range s.names {
		a := next[name]
		sv := &s.servers[i]
		if a == sv.assigned && sv.next == nil {
			continue
		}
		if sv.busy { // the worker finishes its batch first
			sv.next = &a
			continue
		}
		s.take(i, a)
	}
}

// rehome moves the messages queued at variants of p its plan in force hosts no replica of to the variants its
// routing sends their task's traffic to (plan.Rehome), a hop away, as the live planner does: a plan that retires
// a variant would otherwise leave its queue to wait out the deadlines. With cp (a look in the seconds after a new
// plan: core.Looked.Rehome), it also moves the oldest of the messages cp.Excess says to the task's other variants
// (plan.Sibling).
func (s *sim) rehome(p *pipe, cp *core.Pipeline) {
	for _, h := range s.queues {
		if h.pipe != p || h.pending() == 0 {
			continue
		}
		task := p.tasks[h.task]
		dest, n := p.plan.Rehome, h.pending()
		if p.plan.Hosts(task, h.variant.Name) {
			if cp == nil {
				continue
			}
			dest, n = p.plan.Sibling, cp.Excess(task, h.variant.Name, n)
		}
		if n == 0 {
			continue
		}
		kept := h.queue[:0]
		for _, m := range h.queue[h.head:] {
			if n > 0 {
				if to := dest(task, h.variant.Name, plan.Upstream(p.trie.path[m.node]), s.rng.Float64()); to != "" {
					n--
					h.load -= float64(m.items)
					s.push(event{at: s.now + p.comm, kind: evDeliver, target: p.queueIdx[task][to], msg: s.ref(m)})
					continue
				}
			}
			kept = append(kept, m)
		}
		clear(h.queue[len(kept):])
		h.queue, h.head = kept, 0
	}
}

// take makes a server that is not running a batch serve an assignment: a new variant is loaded (its swap time)
// before it takes work.
func (s *sim) take(srv int, a plan.Assignment) {
	sv := &s.servers[srv]
	if old := sv.queue; old >= 0 { // leave the old variant's idle list
		h := s.queues[old]
		for i, f := range h.free {
			if int(f) == srv {
				h.free = append(h.free[:i], h.free[i+1:]...)
				break
			}
		}
	}
	prev := sv.queue
	if prev >= 0 && len(sv.carried) > 0 && (a.Idle() || s.named[a.Pipeline].queueIdx[a.Task][a.Variant] != prev) {
		s.queues[prev].handBack(sv.carried)
		clear(sv.carried)
		sv.carried = sv.carried[:0]
	}
	sv.assigned = a
	if a.Idle() {
		sv.queue, sv.swapping, sv.table = -1, false, nil
		return
	}
	sv.queue = s.named[a.Pipeline].queueIdx[a.Task][a.Variant]
	sv.maxBatch = a.MaxBatch
	s.follow(srv)
	swap := int64(s.queues[sv.queue].variant.SwapMs * float64(time.Millisecond))
	if sv.queue != prev && swap > 0 && !s.loaded {
		sv.swapping, sv.swapEnd = true, s.now+swap
		s.push(event{at: sv.swapEnd, kind: evSwapDone, srv: int32(srv)})
		return
	}
	if sv.queue != prev {
		sv.swapping = false
	}
	s.idle(srv)
}

// result is what the run measured of p.
func (s *sim) result(p *pipe) *Result {
	res := &Result{System: p.system.Name, Pipeline: p.spec.Name, Seconds: p.seconds}
	// Requests still in flight are stuck where no worker serves: the frontend replied late at their deadline.
	for i := range p.seconds {
		x := &p.seconds[i]
		x.Late += x.Arrivals - x.Refused - x.OK - x.Partial - x.Dropped - x.Late - x.Degraded
	}
	sum := &res.Summary
	sum.System, sum.Pipeline = p.system.Name, p.spec.Name
	// The seconds from the end of the warm-up on; JSON has no NaN, so a summary of nothing is zeros.
	first := min(len(p.seconds), int((s.cfg.Warmup+time.Second-1)/time.Second))
	t := tallySeconds(p.seconds[first:])
	sum.Requests, sum.OK, sum.Partial, sum.Dropped, sum.Late = t.arrivals, t.ok, t.partial, t.dropped, t.late
	sum.Refused, sum.Degraded = t.refused, t.degraded
	sum.MaxActiveServers, sum.MaxCostPerHour = t.maxServers, t.maxCost
	if t.arrivals > 0 {
		sum.SLOViolationRatio, sum.UnansweredRatio = t.violationRatio(), t.unansweredRatio()
	}
	if t.arrivals > t.refused {
		sum.AcceptedViolationRatio = t.acceptedViolationRatio()
	}
	if t.ok+t.partial+t.degraded > 0 {
		sum.MeanAccuracy = t.accuracy()
	}
	best, worst := windowAccuracy(p.seconds[first:])
	sum.MaxAccuracyDrop, sum.WorstWindowAccuracy = best-worst, worst
	if t.n > 0 {
		sum.MeanActiveServers, sum.MeanCostPerHour = t.servers/float64(t.n), t.cost/float64(t.n)
		if s.classed() {
			sum.Cluster = s.cluster
			sum.MeanActiveByClass = map[string]float64{}
			for _, sc := range s.cluster {
				sum.MeanActiveByClass[sc.Name] = float64(t.byClass[sc.Name]) / float64(t.n)
			}
		}
	}
	sum.ItemHops = p.hopsDone
	sum.Replans = p.replans
	sum.CheckChanged, sum.CheckPredicted = p.checkChanged, p.checkPredicted
	sum.PlanSeconds = s.planWall.Seconds()
	sum.SimulatedS = float64(p.end) / float64(time.Second)
	if p.plan != nil && p.plan.Allocation != nil {
		sum.PlannedAccuracy = p.plan.Allocation.SystemAccuracy
	}
	if p.plan != nil {
		sum.Cascades = p.plan.Cascades
	}
	var firsts, sent uint64
	for _, h := range s.queues {
		if h.pipe == p {
			firsts, sent = firsts+h.itemsIfEscalating(), sent+h.subs.Escalated
		}
	}
	if firsts > 0 {
		sum.EscalationRatio = float64(sent) / float64(firsts)
	}
	return res
}

// itemsIfEscalating is the items h executed if it is a cascade's first variant, else 0.
func (h *variantQueue) itemsIfEscalating() uint64 {
	t := h.pipe.spec.Tasks[h.task]
	if t.Cascade == nil || t.Cascade.Variants[0] != h.variant.Name {
		return 0
	}
	return h.items
}
