// Package sim is Sleipnir's discrete-event simulator: frontends, one queue per model variant shared by its replicas,
// workers that batch, execute, fan out, drop and reroute, and the planner's control loop, in simulated time. It
// runs the production policy code of pkg/ (control loop and allocators, most-accurate-first routing, deadline
// decisions, batching rule, demand and multiplicative-factor estimation, worker assignment, emulated latencies and
// fan-out) and re-implements none of it; what it models itself is the data plane: queues, timing and completion.
// Seeded and deterministic.
package sim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/batching"
	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/executor/emulated"
	hopstep "github.com/sleipnir-serving/sleipnir/pkg/hop"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/tuner"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// Config is one simulation.
type Config struct {
	Spec     *pipeline.Spec
	Workload *workload.Workload
	// Servers is the cluster size.
	Servers int
	// System is the system that plans (control.ParseSystem; default loki). Its solves are as Control says, but
	// with one branch-and-bound worker unless it sets more: a run must not depend on the machine's CPUs.
	System string
	Seed   uint64
	// Control tunes the planner's loop (pkg/control; zero values are its defaults).
	Control control.Config
	// DemandAlpha is the weight of the newest second in the demand and multiplicative-factor averages (default
	// 0.3, as the planner's).
	DemandAlpha float64
	// CommLatency is the latency of one hop (a publish to a variant's queue, or a result to the frontend);
	// negative means the spec's comm_latency_ms.
	CommLatency time.Duration
	// Warmup is left out of the summary (not of the time series): the demand estimate and the plan need a few
	// seconds to follow a workload that starts at full rate on an idle cluster.
	Warmup time.Duration
	// Progress, when set, is called about every simulated minute with the simulated time done and the total.
	Progress func(done, total time.Duration)
	// Slowdown emulates slower machines (ParseSlowdowns): the workers' batches take longer than emulated, and the
	// workers measure and report it as live ones do (unless Control.ProfilesOnly).
	Slowdown []Slowdown
}

// Second is one second of a simulation's time series. Requests are counted in the second they arrived.
type Second struct {
	// DemandQPS is the workload's rate; Arrivals the requests that arrived.
	DemandQPS float64 `json:"demand_qps"`
	Arrivals  int     `json:"arrivals"`
	// OK, Partial, Dropped and Late count the replies by status.
	OK      int `json:"ok"`
	Partial int `json:"partial"`
	Dropped int `json:"dropped"`
	Late    int `json:"late"`
	// AccuracySum sums the served accuracy of the ok and partial replies.
	AccuracySum float64 `json:"accuracy_sum"`
	// ActiveServers is the number of workers assigned a variant at the end of the second.
	ActiveServers int `json:"active_servers"`
	// EstimateQPS is the planner's demand estimate at the end of the second.
	EstimateQPS float64 `json:"estimate_qps"`
	Mode        string  `json:"mode"`
	// Epoch is the plan's epoch at the end of the second: each new allocation raises it.
	Epoch uint64 `json:"epoch"`
}

// Result is what a simulation measured.
type Result struct {
	System  string   `json:"system"`
	Seconds []Second `json:"-"`
	Summary Summary  `json:"summary"`
}

// Summary aggregates a simulation.
type Summary struct {
	System            string  `json:"system"`
	Requests          int     `json:"requests"`
	OK                int     `json:"ok"`
	Partial           int     `json:"partial"`
	Dropped           int     `json:"dropped"`
	Late              int     `json:"late"`
	SLOViolationRatio float64 `json:"slo_violation_ratio"`
	// MeanAccuracy is the mean served accuracy of the ok and partial replies (as loadgen reports it).
	MeanAccuracy      float64 `json:"mean_accuracy"`
	MeanActiveServers float64 `json:"mean_active_servers"`
	MaxActiveServers  int     `json:"max_active_servers"`
	// ItemHops counts items executed at a task; Replans the new allocations published.
	ItemHops int64 `json:"item_hops"`
	Replans  int   `json:"replans"`
	// With the plan check (control.Config.Check): CheckChanged counts the new allocations the check changed, and
	// CheckPredicted is the violation ratio it predicted for the last one.
	CheckChanged   int     `json:"check_changed,omitempty"`
	CheckPredicted float64 `json:"check_predicted,omitempty"`
	// PlanSeconds is the wall time the allocators took (part of WallSeconds).
	PlanSeconds float64 `json:"plan_s"`
	SimulatedS  float64 `json:"simulated_s"`
	WallSeconds float64 `json:"wall_s"`
}

// Run simulates cfg.Workload to its end, and then until every request in flight has been answered (or is stuck
// where no worker serves, and counts as late).
func Run(cfg Config) (*Result, error) {
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s.run()
	res := s.result()
	res.Summary.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// Event kinds.
const (
	evArrival = iota
	evDeliver // a task message reaches its variant's queue
	evBatchDone
	evSwapDone
	evTick // the planner's, frontends' and workers' once-a-second reports
	evTune // the tuner's look at the queues (pkg/tuner)
)

type event struct {
	at   int64 // simulated ns
	seq  uint64
	kind uint8
	srv  int32
	hop  int32
	msg  *message
}

type request struct {
	arrival, due int64
	replied      int64 // when the frontend replied (finish)
	second       int32
	pending      int // items not yet finished or dropped
	ok, dropped  int
	acc          completion.Accuracy
}

// message is a task message: items of one request for one variant, all from the same parent item.
type message struct {
	req      *request
	items    int
	den      uint64 // each item's weight is 1/den of the request (wire.Item.Den)
	node     int32  // path of hops before this one (pathTrie)
	enqueued int64
	dropped  string // reason when dropped before execution
}

// hop is one variant of one task.
type hop struct {
	name     string
	task     int
	variant  *pipeline.Variant
	exec     *emulated.Executor
	children []string // the task's child tasks, in emulated.Executor's order
	queue    []*message
	head     int
	free     []int32 // idle servers serving this variant
	stage    *deadline.Stage
	budget   time.Duration
	table    *hopstep.Table // forwarding under the current plan (children numbered in Emulated's order)
	// What the variant's replicas executed and the sub-requests they emitted per child task, cumulative as a
	// worker's heartbeat reports them (wire.Observed); the planner's tick folds them (demand.Counters).
	items   uint64
	emitted map[string]uint64
	// load is the items in its queue or in service: what the tuner sees wait.
	load float64
	key  string // "pipeline:task/variant", the key of its measurements in a heartbeat
	// subs counts its items by the sub-requests they emitted (the heartbeat's histogram); draw, in a plan check,
	// is the observed distribution its items emit from (check.go).
	subs wire.FanoutCounts
	draw *demand.SubRequestDist
}

type server struct {
	hop      int32 // -1 idle
	maxBatch int
	busy     bool
	swapping bool
	swapEnd  int64 // when the current swap ends
	batch    []*message
	next     *plan.Assignment // an assignment to take when the running batch is done
	assigned plan.Assignment
	measured *latency.Window // the batch latencies it measured; nil until it runs one
}

type sim struct {
	cfg      Config
	system   control.System
	spec     *pipeline.Spec
	comm     int64
	rng      *rand.Rand
	events   eventHeap
	seq      uint64
	now      int64
	hops     []*hop
	hopIdx   map[string]map[string]int32 // task -> variant -> index in hops (no string building per item)
	tasks    []string
	servers  []server
	names    []string // worker names, for plan.Assign
	assign   map[string]plan.Assignment
	loop     *control.Loop
	plan     *plan.Plan
	control  control.Config // cfg.Control with its defaults
	tune     *tuner.Tuner   // nil: no tuner
	lent     map[string]int
	est      *demand.Estimator
	fan      *demand.FanoutEstimator
	counters *demand.Counters
	latency  *latency.Board // the workers' latency reports, as the planner keeps them
	taskEst  *demand.TaskDemand
	trie     pathTrie
	arr      *workload.Arrivals
	// per-second accounting
	seconds      []Second
	arrivedNow   int
	taskArrivals []int
	inFlight     int
	hopsDone     int64
	replans      int
	end          int64
	loaded       bool            // assignments take no swap time (the start)
	planWall     time.Duration   // wall time in the control loop
	step         hopstep.Stepper // the hop step's scratch
	children     []int           // one item's sub-requests' child tasks (indices in Emulated's order)
	routeDraws   replay          // their routing draws, taken from rng in the order the simulator always took them
	routeRand    *rand.Rand      // routeDraws, for the hop step
	traffic      *demand.Traffic // the frontend's gaps and the workers' histograms, for the plan check
	gaps         demand.Gaps     // the frontend's gaps since its last report
	peaks        []float64       // in a plan check, the most items each hop had queued or in service (check.go)
	// what the plan check did to the allocations published (noteCheck)
	checkChanged   int
	checkPredicted float64
}

func newSim(cfg Config) (*sim, error) {
	switch {
	case cfg.Spec == nil:
		return nil, errors.New("sim: no pipeline")
	case cfg.Workload == nil:
		return nil, errors.New("sim: no workload")
	case cfg.Servers <= 0:
		return nil, fmt.Errorf("sim: %d servers: want at least 1", cfg.Servers)
	}
	if err := cfg.Workload.Validate(); err != nil {
		return nil, err
	}
	name, solve := cfg.System, cfg.Control
	if name == "" {
		name = "loki"
	}
	if solve.SolveWorkers == 0 {
		solve.SolveWorkers = 1
	}
	check := &Checker{CommLatency: cfg.CommLatency, Seed: cfg.Seed, TuneEvery: cfg.Control.TuneEvery}
	solve.Checker = check
	system, err := control.ParseSystem(name, cfg.Spec, solve)
	if err != nil {
		return nil, err
	}
	check.Policy = system.Policy
	spec := cfg.Spec
	s := &sim{cfg: cfg, system: system, spec: spec, rng: rand.New(rand.NewPCG(cfg.Seed, 0x51a)), hopIdx: map[string]map[string]int32{},
		est: cfg.Control.DemandEstimator(cfg.DemandAlpha), fan: demand.NewFanoutEstimator(cfg.DemandAlpha, 0),
		counters: demand.NewCounters(), latency: latency.NewBoard(), assign: map[string]plan.Assignment{},
		traffic: demand.NewTraffic()}
	s.comm = int64(cfg.CommLatency)
	if cfg.CommLatency < 0 {
		s.comm = int64(spec.CommLatencyMs * float64(time.Millisecond))
	}
	for _, t := range spec.Tasks {
		s.tasks = append(s.tasks, t.Name)
	}
	s.taskEst = demand.NewTaskDemand(s.tasks, func() *demand.Estimator {
		return cfg.Control.DemandEstimator(cfg.DemandAlpha)
	})
	s.taskArrivals = make([]int, len(spec.Tasks))
	for ti := range spec.Tasks {
		t := &spec.Tasks[ti]
		for vi := range t.Variants {
			v := &t.Variants[vi]
			name := wire.Hop(t.Name, v.Name)
			e := emulated.New(spec, t.Name, v, cfg.Seed^uint64(len(s.hops)+1)*0x9e3779b97f4a7c15)
			h := &hop{name: name, task: ti, variant: v, exec: e, children: e.Children(), emitted: map[string]uint64{},
				key: spec.Name + ":" + name}
			if s.hopIdx[t.Name] == nil {
				s.hopIdx[t.Name] = map[string]int32{}
			}
			s.hopIdx[t.Name][v.Name] = int32(len(s.hops))
			s.hops = append(s.hops, h)
		}
	}
	s.trie = newPathTrie(spec, s.hops)
	s.routeRand = rand.New(&s.routeDraws)

	// The planner's start: its first plan, its replicas given to the workers.
	initial, err := control.FirstPlan(spec)
	if err != nil {
		return nil, err
	}
	initial.Epoch = 1
	s.loop = control.New(spec, cfg.Control, system.Allocator, initial)
	s.control = cfg.Control
	s.control.SetDefaults()
	if s.control.Tunes() {
		s.tune = tuner.New()
		s.push(event{at: int64(s.control.TuneEvery), kind: evTune})
	}
	s.servers = make([]server, cfg.Servers)
	for i := range s.servers {
		s.servers[i].hop = -1
		s.names = append(s.names, fmt.Sprintf("w%04d", i))
	}
	s.loaded = true // the workers start with the static plan's variants loaded
	s.applyPlan(initial, true)
	s.loaded = false
	s.arr = cfg.Workload.Arrivals(cfg.Seed)
	s.end = int64(cfg.Workload.Duration())
	s.seconds = make([]Second, (s.end+int64(time.Second)-1)/int64(time.Second))
	if at, ok := s.arr.Next(); ok {
		s.push(event{at: int64(at), kind: evArrival})
	}
	s.push(event{at: int64(time.Second), kind: evTick})
	return s, nil
}

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	s.events.push(e)
}

func (s *sim) run() {
	nextProgress := int64(time.Minute)
	for s.events.len() > 0 {
		e := s.events.pop()
		s.now = e.at
		if s.cfg.Progress != nil && s.now >= nextProgress {
			s.cfg.Progress(time.Duration(min(s.now, s.end)), time.Duration(s.end))
			nextProgress += int64(time.Minute)
		}
		switch e.kind {
		case evArrival:
			s.arrive()
			if at, ok := s.arr.Next(); ok {
				s.push(event{at: int64(at), kind: evArrival})
			}
		case evDeliver:
			s.deliver(int(e.hop), e.msg)
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
				s.push(event{at: s.now + int64(s.control.TuneEvery), kind: evTune})
			}
		case evTick:
			s.tick()
			// Ticks go on past the workload while requests are in flight, so the loop keeps serving them.
			if s.now < s.end || s.inFlight > 0 && s.now < s.end+int64(time.Minute) {
				s.push(event{at: s.now + int64(time.Second), kind: evTick})
			}
		}
	}
	if s.cfg.Progress != nil {
		s.cfg.Progress(time.Duration(s.end), time.Duration(s.end))
	}
}

// arrive is a frontend accepting a request: its deadline is the SLO from now, and it goes to the root variant the
// routing picks.
func (s *sim) arrive() {
	sec := int32(s.now / int64(time.Second))
	r := &request{arrival: s.now, due: s.now + int64(s.spec.SLOMs*float64(time.Millisecond)), second: sec,
		pending: 1}
	s.inFlight++
	s.arrivedNow++
	s.gaps.Note(s.time())
	if int(sec) < len(s.seconds) {
		s.seconds[sec].Arrivals++
	}
	v := plan.Pick(s.plan.Routing.Root, s.rng.Float64())
	h, ok := s.hopIdx[s.spec.Root().Name][v]
	if !ok { // no root variant hosted: the frontend's publish has nowhere to go
		r.pending = 0
		r.dropped++
		s.finish(r, s.now)
		return
	}
	s.push(event{at: s.now + s.comm, kind: evDeliver, hop: h,
		msg: &message{req: r, items: 1, den: 1, node: 0}})
}

// deliver puts a message in its variant's queue, and hands it to an idle replica if there is one.
func (s *sim) deliver(hi int, m *message) {
	h := s.hops[hi]
	m.enqueued = s.now
	h.queue = append(h.queue, m)
	h.load += float64(m.items)
	s.taskArrivals[h.task] += m.items
	if s.peaks != nil {
		s.peaks[hi] = max(s.peaks[hi], h.load)
	}
	if n := len(h.free); n > 0 {
		srv := h.free[n-1]
		h.free = h.free[:n-1]
		s.startBatch(int(srv))
	}
}

func (h *hop) pending() int { return len(h.queue) - h.head }

func (h *hop) pop() *message {
	m := h.queue[h.head]
	h.queue[h.head] = nil
	h.head++
	if h.head == len(h.queue) {
		h.queue, h.head = h.queue[:0], 0
	} else if h.head > 1024 && h.head*2 > len(h.queue) {
		n := copy(h.queue, h.queue[h.head:])
		h.queue, h.head = h.queue[:n], 0
	}
	return m
}

// idle makes a server that has nothing running take work, or wait for it.
func (s *sim) idle(srv int) {
	sv := &s.servers[srv]
	if sv.hop < 0 || sv.busy || sv.swapping {
		return
	}
	if s.hops[sv.hop].pending() > 0 {
		s.startBatch(srv)
		return
	}
	h := s.hops[sv.hop]
	h.free = append(h.free, int32(srv))
}

// startBatch is the worker's serveOnce up to execution: take the first message and what the batching rule adds,
// drop what the deadline policy drops before executing, and execute the rest in model batches. A message that does
// not fit the batch stays at the head of the queue, with those behind it (the live worker naks it, and JetStream
// delivers it again before newer ones).
func (s *sim) startBatch(srv int) {
	sv := &s.servers[srv]
	h := s.hops[sv.hop]
	now := s.time()
	taken := 0
	take := func(m *message) bool {
		if reason := h.stage.BeforeExecute(now, time.Unix(0, m.req.due), time.Unix(0, m.enqueued)); reason != "" {
			m.dropped = reason
		} else if batching.Fits(sv.maxBatch, taken, m.items) {
			taken += m.items
		} else {
			return false
		}
		sv.batch = append(sv.batch, m)
		return true
	}
	take(h.pop())
	for n := batching.More(sv.maxBatch, taken, h.pending()); n > 0 && take(h.queue[h.head]); n-- {
		h.pop()
	}
	var d time.Duration
	scale := slowdownAt(s.cfg.Slowdown, srv, time.Duration(s.now))
	for c := range batching.Chunks(taken, sv.maxBatch) {
		n := min(sv.maxBatch, taken-c*sv.maxBatch)
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
	h := s.hops[sv.hop]
	for _, m := range sv.batch {
		r := m.req
		h.load -= float64(m.items)
		if m.dropped != "" {
			r.dropped += m.items
			s.leaves(r, m.items)
			continue
		}
		s.hopsDone += int64(m.items)
		h.items += uint64(m.items)
		node := s.trie.child(m.node, sv.hop)
		when := hopstep.When{Now: s.time(), AtTask: time.Duration(s.now - m.enqueued),
			Left: time.Duration(r.due - s.now)}
		for range m.items {
			k := s.subRequests(h)
			s.children, s.routeDraws.next, s.routeDraws.draws = s.children[:0], 0, s.routeDraws.draws[:0]
			for range k {
				c := h.exec.ChildOf(s.rng.Float64())
				h.emitted[h.children[c]]++
				s.children = append(s.children, c)
				s.routeDraws.draws = append(s.routeDraws.draws, s.rng.Uint64(), s.rng.Uint64())
			}
			out, err := s.step.Step(h.table, hopstep.Item{Den: m.den, Children: s.children}, when, s.routeRand)
			if err != nil || k == 0 {
				if err != nil { // a failed leaf
					r.dropped++
				} else {
					r.ok++
					r.acc.Add(1/float64(m.den), s.trie.accuracy(node))
				}
				s.leaves(r, 1)
				continue
			}
			r.pending += k - 1
			for range out.Drops {
				r.dropped++
				s.leaves(r, 1)
			}
			for _, msg := range out.Messages {
				s.push(event{at: s.now + s.comm, kind: evDeliver, hop: s.hopIdx[h.children[msg.Child]][msg.Variant],
					msg: &message{req: r, items: len(msg.Subs), den: out.Den, node: node}})
			}
		}
	}
	clear(sv.batch)
	sv.batch = sv.batch[:0]
	sv.busy = false
	if sv.next != nil {
		a := *sv.next
		sv.next = nil
		s.take(srv, a)
		return
	}
	s.idle(srv)
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
		s.finish(r, s.now+s.comm)
	}
}

// finish records a request's reply: late when its last leaf reached the frontend after the deadline (the frontend
// replied at the deadline with what it had).
func (s *sim) finish(r *request, at int64) {
	s.inFlight--
	r.replied = at
	if int(r.second) >= len(s.seconds) {
		return
	}
	sec := &s.seconds[r.second]
	switch completion.Status(at > r.due, r.ok, r.dropped, 0) {
	case wire.StatusOK:
		sec.OK++
		sec.AccuracySum += r.acc.Value()
	case wire.StatusPartial:
		sec.Partial++
		sec.AccuracySum += r.acc.Value()
	case wire.StatusLate:
		sec.Late++
	default:
		sec.Dropped++
	}
}

func (s *sim) time() time.Time { return time.Unix(0, s.now) }

// tick is one second: the frontend's demand report, the workers' heartbeats, the planner's estimates and control
// loop, and the second's sample.
func (s *sim) tick() {
	now := s.time()
	s.est.Observe("frontend", s.arrivedNow, time.Second, now)
	s.arrivedNow = 0
	s.traffic.Observe(wire.DemandReport{Frontend: "frontend", GapsMs: s.gaps.Take()}, now)
	// The workers' heartbeat, as one worker's: the counters of every variant that executed anything.
	beat := wire.Registration{Observed: map[string]wire.Observed{}}
	for _, h := range s.hops {
		if h.items > 0 {
			beat.Observed[h.name] = wire.Observed{FanoutCounts: wire.FanoutCounts{Items: h.items,
				Children: maps.Clone(h.emitted), SubRequests: slices.Clone(h.subs.SubRequests)}}
		}
	}
	delta := s.counters.Fold("workers", beat)
	for _, h := range s.hops {
		if d := delta[h.name]; d.Items > 0 {
			s.fan.Observe(h.name, d)
			s.traffic.Fold(h.name, d)
		}
	}
	for ti, name := range s.tasks {
		s.taskEst.Add(name, uint64(s.taskArrivals[ti]))
		s.taskArrivals[ti] = 0
	}
	taskDemand := s.taskEst.Tick(now, time.Second)
	s.fan.Tick()
	o := control.Observed{Demand: s.est.Tick(now), DemandWindow: s.est.Window(), Fanout: s.fan.Estimate(s.spec),
		FanoutSamples: s.fan.Samples(), TaskDemand: taskDemand, Servers: len(s.servers), Profiles: s.profiles(now),
		Traffic: s.traffic.Sample(now)}
	t0 := time.Now()
	st := s.loop.Next(now, o)
	s.planWall += time.Since(t0)
	if st.Plan != nil {
		s.loop.Published(st, o, now)
		s.applyPlan(st.Plan, st.Replanned)
		if st.Replanned {
			s.replans++
			s.noteCheck(st.Plan)
		}
	}
	s.rehome(s.plan)
	if sec := s.now/int64(time.Second) - 1; sec >= 0 && int(sec) < len(s.seconds) {
		active := 0
		for i := range s.servers {
			if s.servers[i].assigned.Variant != "" {
				active++
			}
		}
		x := &s.seconds[sec]
		x.ActiveServers, x.EstimateQPS, x.Mode, x.Epoch = active, o.Demand, s.plan.Mode, s.plan.Epoch
		x.DemandQPS = s.cfg.Workload.RateAt(time.Duration(sec) * time.Second)
	}
}

// applyPlan makes a published plan the one frontends and workers follow; a new allocation also reassigns the
// workers (plan.Assign, as the planner does).
func (s *sim) applyPlan(p *plan.Plan, replanned bool) {
	s.plan = p
	for _, h := range s.hops {
		replicas := 0 // one stage decides for all of the variant's replicas
		if vp := p.Find(s.tasks[h.task], h.variant.Name); vp != nil {
			h.budget = time.Duration(vp.BudgetMs * float64(time.Millisecond))
			replicas = vp.Replicas
		}
		h.stage = deadline.NewStage(s.spec, p, s.system.Policy, s.tasks[h.task], h.variant.Name, h.budget, replicas)
		h.table = hopstep.NewTable(s.spec, p, h.stage, s.tasks[h.task], h.variant.Name, h.children)
	}
	if !replanned {
		return
	}
	if s.tune != nil { // the tuner sees the new plan at once: lent workers stay where the plan still wants them
		s.lent = s.tune.Look(s.time(), s.tuneInput(p))
	}
	s.assignWorkers(p)
}

// tuneInput is what the tuner sees under plan p.
func (s *sim) tuneInput(p *plan.Plan) tuner.Input {
	return tuner.Observe(s.spec, p, func(hop string) float64 {
		for _, h := range s.hops {
			if h.name == hop {
				return h.load
			}
		}
		return 0
	}, len(s.servers), s.est.Estimate(), s.control.RouteUtilization)
}

// tuneLook is the tuner's look at the queues, as the planner's: workers lent or taken back are reassigned at once.
func (s *sim) tuneLook() {
	lent := s.tune.Look(s.time(), s.tuneInput(s.plan))
	if maps.Equal(lent, s.lent) {
		return
	}
	s.lent = lent
	s.assignWorkers(s.plan)
}

// assignWorkers gives the replicas of plan p and the tuner's loans to the workers (plan.Assign, as the planner
// does), moving as few as it can.
func (s *sim) assignWorkers(p *plan.Plan) {
	next, _ := plan.Assign([]*plan.Plan{tuner.WithLoans(p, s.lent)}, s.names, s.assign)
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

// rehome moves the messages queued at variants p, the plan in force, hosts no replica of to the variants its routing
// sends their task's traffic to (plan.Rehome), a hop away, as the live planner does every second: a plan that
// retires a variant would otherwise leave its queue to wait out the deadlines.
func (s *sim) rehome(p *plan.Plan) {
	for _, h := range s.hops {
		task := s.tasks[h.task]
		if h.pending() == 0 || p.Hosts(task, h.variant.Name) {
			continue
		}
		kept := h.queue[:0]
		for _, m := range h.queue[h.head:] {
			if to := p.Rehome(task, h.variant.Name, plan.Upstream(s.trie.path[m.node]), s.rng.Float64()); to != "" {
				h.load -= float64(m.items)
				s.push(event{at: s.now + s.comm, kind: evDeliver, hop: s.hopIdx[task][to], msg: m})
				continue
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
	if old := sv.hop; old >= 0 { // leave the old variant's idle list
		h := s.hops[old]
		for i, f := range h.free {
			if int(f) == srv {
				h.free = append(h.free[:i], h.free[i+1:]...)
				break
			}
		}
	}
	prev := sv.hop
	sv.assigned = a
	if a.Idle() {
		sv.hop, sv.swapping = -1, false
		return
	}
	sv.hop = s.hopIdx[a.Task][a.Variant]
	sv.maxBatch = a.MaxBatch
	swap := int64(s.hops[sv.hop].variant.SwapMs * float64(time.Millisecond))
	if sv.hop != prev && swap > 0 && !s.loaded {
		sv.swapping, sv.swapEnd = true, s.now+swap
		s.push(event{at: sv.swapEnd, kind: evSwapDone, srv: int32(srv)})
		return
	}
	if sv.hop != prev {
		sv.swapping = false
	}
	s.idle(srv)
}

func (s *sim) result() *Result {
	// Requests still in flight are stuck where no worker serves: the frontend replied late at their deadline.
	res := &Result{System: s.system.Name, Seconds: s.seconds}
	sum := &res.Summary
	sum.System = s.system.Name
	for i := range s.seconds {
		x := &s.seconds[i]
		x.Late += x.Arrivals - x.OK - x.Partial - x.Dropped - x.Late
	}
	// The seconds from the end of the warm-up on; JSON has no NaN, so a summary of nothing is zeros.
	first := min(len(s.seconds), int((s.cfg.Warmup+time.Second-1)/time.Second))
	t := tallySeconds(s.seconds[first:])
	sum.Requests, sum.OK, sum.Partial, sum.Dropped, sum.Late = t.arrivals, t.ok, t.partial, t.dropped, t.late
	sum.MaxActiveServers = t.maxServers
	if t.arrivals > 0 {
		sum.SLOViolationRatio = t.violationRatio()
	}
	if t.ok+t.partial > 0 {
		sum.MeanAccuracy = t.accuracy()
	}
	if t.n > 0 {
		sum.MeanActiveServers = t.servers / float64(t.n)
	}
	sum.ItemHops = s.hopsDone
	sum.Replans = s.replans
	sum.CheckChanged, sum.CheckPredicted = s.checkChanged, s.checkPredicted
	sum.PlanSeconds = s.planWall.Seconds()
	sum.SimulatedS = float64(s.end) / float64(time.Second)
	return res
}
