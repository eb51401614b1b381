// Package sim is Sleipnir's discrete-event simulator: frontends, one queue per model variant shared by its replicas,
// workers that batch, execute, fan out, drop and reroute, and the planner's control loop, in simulated time. It
// runs the production policy code of pkg/ (control loop and allocators, most-accurate-first routing, deadline
// decisions, batching rule, demand and multiplicative-factor estimation, worker assignment, emulated latencies and
// fan-out, through the planning core of pkg/core) and re-implements none of it; what it models itself is the data plane: queues, timing and completion.
// Seeded and deterministic.
package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/admission"
	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/core"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/executor/emulated"
	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/hop"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// Config is one simulation.
type Config struct {
	// Spec and Workload are the pipeline and its demand; or else Pipelines lists several pipelines sharing the
	// servers, each with its own demand (RunAll).
	Spec      *pipeline.Spec
	Workload  *workload.Workload
	Pipelines []Served
	// Servers is the cluster size: servers of the default class. Cluster, when set, replaces it: the servers per
	// class with their prices (each server runs its class's variants, "model@class", at their profiles; the summary
	// reports the cost of those in use).
	Servers int
	Cluster plan.Cluster
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
	// Admit runs the frontends' admission control (pkg/admission), as a frontend's --admission; off, they admit
	// every request.
	Admit bool
	// Slowdown emulates slower machines (ParseSlowdowns): the workers' batches take longer than emulated, and the
	// workers measure and report it as live ones do (unless Control.ProfilesOnly).
	Slowdown []Slowdown
}

// Served is one pipeline of a simulation and its demand.
type Served struct {
	Spec     *pipeline.Spec
	Workload *workload.Workload
}

// served are the pipelines cfg simulates.
func (cfg Config) served() ([]Served, error) {
	switch {
	case len(cfg.Pipelines) > 0 && (cfg.Spec != nil || cfg.Workload != nil):
		return nil, errors.New("sim: both a pipeline and a list of pipelines")
	case len(cfg.Pipelines) > 0:
		return cfg.Pipelines, nil
	}
	return []Served{{Spec: cfg.Spec, Workload: cfg.Workload}}, nil
}

// Run simulates one pipeline's workload to its end, and then until every request in flight has been answered (or
// is stuck where no worker serves, and counts as late).
func Run(cfg Config) (*Result, error) {
	if len(cfg.Pipelines) > 1 {
		return nil, fmt.Errorf("sim: %d pipelines: RunAll runs several", len(cfg.Pipelines))
	}
	res, err := RunAll(cfg)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// RunAll simulates every pipeline of cfg on the shared servers until each workload has ended and its requests
// have been answered; one result per pipeline, in cfg's order.
func RunAll(cfg Config) ([]*Result, error) {
	solved, solving := ramsis.Solved() // before newSim, which applies the first plan
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s.run()
	if s.policyErr != nil {
		return nil, fmt.Errorf("sim: routing_mode ramsis: %w", s.policyErr)
	}
	solvedAfter, solvingAfter := ramsis.Solved()
	out := make([]*Result, len(s.pipes))
	for i, p := range s.pipes {
		out[i] = s.result(p)
		out[i].Summary.WallSeconds = time.Since(start).Seconds()
		out[i].Summary.PoliciesSolved = solvedAfter - solved
		out[i].Summary.PolicySeconds = (solvingAfter - solving).Seconds()
	}
	return out, nil
}

// Event kinds.
const (
	evArrival = iota // at the frontend of pipeline target
	evDeliver        // a task message reaches its variant's queue
	evBatchDone
	evSwapDone
	evTick // the planner's, frontends' and workers' once-a-second reports
	evTune // the tuner's look at the queues (pkg/tuner)
)

type event struct {
	at     int64 // simulated ns
	seq    uint64
	kind   uint8
	srv    int32
	target int32 // the pipeline (evArrival) or the variant queue (evDeliver)
	// msg is the message delivered (evDeliver), as its index in sim.msgs: an event holds no pointer, so moving
	// events in the heap costs the garbage collector nothing (write barriers were a tenth of the simulator's time).
	msg int32
}

type request struct {
	pipe         *pipe
	arrival, due int64
	replied      int64 // when the frontend replied (finish)
	second       int32
	pending      int // items not yet finished or dropped
	ok, dropped  int
	degraded     int     // leaves answered degraded (deadline policy degrade)
	parts        []uint8 // per join task of its pipeline (pipe.joinIdx): the parts that reached the frontend
	acc          completion.Accuracy
}

// message is a task message: items of one request for one variant, all from the same parent item.
type message struct {
	req      *request
	items    int
	den      uint64 // each item's weight is 1/den of the request (wire.Item.Den)
	node     int32  // path of variants before this one (pathTrie)
	enqueued int64
	dropped  string // reason when dropped before execution
	// delivered counts its deliveries to a replica (JetStream's NumDelivered): batching.HandBack reads it
	delivered uint64
	id        int32 // its index in sim.msgs (sim.ref); 0 until it is first sent
	// gear is the threshold its items were sent on at by a cascade's first variant under a gear (0: the plan's).
	gear float64
}

// variantQueue is one variant of one task: its queue, its idle servers and what its replicas measured.
type variantQueue struct {
	pipe     *pipe
	name     string
	task     int
	variant  *pipeline.Variant
	exec     *emulated.Executor
	children []string // the task's child tasks, in emulated.Executor's order
	// childQueues are, per child (children's order), the child's variant queues by variant name: a message's
	// destination is found by a scan of a few, not two string-keyed maps
	childQueues [][]namedQueue
	queue       []*message
	head        int
	free        []int32 // idle servers serving this variant
	// overPlan counts the model batches its servers ran larger than their assignment's max batch: at a gear's
	// (plan.Gear.Batches).
	overPlan int
	budget   time.Duration // under the current plan
	// What the variant's replicas executed, the messages those came in and the sub-requests they emitted per child
	// task, cumulative as a worker's heartbeat reports them (wire.Observed); the core folds them.
	items, messages uint64
	emitted         []uint64 // per child task, in children's order
	// inService is the messages its servers have taken and not finished: with those waiting, what JetStream shows
	// the tuner (a consumer's pending and unacknowledged messages).
	inService int
	// load is the items in its queue or in service, peak the most it had in a plan check (check.go).
	load, peak float64
	// transit is the items on their way to it: a live publish is in the stream's count once stored, where the
	// simulator delivers a hop later.
	transit float64
	key     string // "pipeline:task/variant", the key of its measurements in a heartbeat
	// subs counts its items by the sub-requests they emitted (the heartbeat's histogram); draw, in a plan check,
	// is the observed distribution its items emit from (check.go).
	subs wire.FanoutCounts
	draw *demand.SubRequestDist
	// emittedBy is emitted by child task name, the heartbeat's (reused)
	emittedBy map[string]uint64
}

type server struct {
	queue    int32 // the variant queue it serves (index in sim.queues); -1 idle
	maxBatch int
	busy     bool
	swapping bool
	swapEnd  int64 // when the current swap ends
	batch    []*message
	carried  []*message       // taken for the last batch, they did not fit it (batching.HandBack): the next begins with them
	next     *plan.Assignment // an assignment to take when the running batch is done
	assigned plan.Assignment
	measured *latency.Window // the batch latencies it measured; nil until it runs one
	ran      []*variantQueue // the variants it measured, in the order it first ran them
	// beat and summaries hold its heartbeat of them (latencies), reused
	beat      map[string]wire.Observed
	summaries []wire.BatchLatency
	// table is its forwarding under the plan in force, with its own deadline stage (hop.ForReplica, as a live
	// worker's; children numbered in Emulated's order).
	table *hop.Table
	// gear is its gear switch when it serves a cascade's first variant under a plan with gears (pkg/gears).
	gear *gears.Switch
	// geared is its forwarding per gear when it serves a cascade's variant under a plan with gears (nil
	// otherwise): table is the one of its own gear (gear), or the plan's.
	geared *hop.Geared
}

// pipe is one pipeline of the simulation: its frontend, its variant queues, its plan in force and its time series.
type pipe struct {
	spec     *pipeline.Spec
	work     *workload.Workload
	arr      *workload.Arrivals
	system   control.System
	core     *core.Pipeline // its part of the planning core
	plan     *plan.Plan
	queueIdx map[string]map[string]int32 // task -> variant -> index in sim.queues (no string building per item)
	rootIdx  map[string]int32            // queueIdx of the root task
	tasks    []string
	// joinOf is, per task (index in spec.Tasks), the join task its items are parts of (pipeline.Spec.JoinAfter),
	// and joinIdx each join task's index in request.parts.
	joinOf  []*pipeline.Task
	joinIdx map[string]int
	trie    pathTrie
	slo     int64
	comm    int64          // the latency of one of its hops
	admit   admission.Plan // what admission control knows of plan
	end     int64          // its workload's end
	seconds []Second
	// arrivedNow counts the arrivals since the last tick, and gaps the times between them (the frontend's demand
	// report).
	arrivedNow int
	gaps       demand.Gaps
	hopsDone   int64
	replans    int
	// what the plan check did to the allocations published (noteCheck)
	checkChanged   int
	checkPredicted float64
	rootQueue      []routing.QueueOption // routing_mode queue: the root's options, and the time allotted below it
	rootRest       time.Duration
	rootPolicy     *ramsis.Choice // routing_mode ramsis: the root's policy (nil: no choice, the tables decide)
	rootByPolicy   int64          // the requests whose root variant it chose
	sent           deliveries     // its messages on their way to a queue (send)
	// hosted are the queues of the variants of hostedFor, a plan (the tuner's looks read them)
	hosted    []int32
	hostedFor *plan.Plan
}

type sim struct {
	cfg     Config
	pipes   []*pipe
	named   map[string]*pipe
	rng     *rand.Rand
	events  eventHeap
	seq     uint64
	now     int64
	queues  []*variantQueue // every pipeline's
	servers []server
	taken   []*message // startBatch's scratch: the messages a replica took for a batch
	names   []string   // worker names, for plan.Assign
	cluster plan.Cluster
	classOf []string          // each server's class
	classes map[string]string // by worker name, for the assignment (nil: every server of the default class)
	assign  map[string]plan.Assignment
	// core is the planner's planning core (pkg/core): the simulator gives it the reports and heartbeats the live
	// planner would hear, and follows what it decides.
	core       *core.Cluster
	gate       *admission.Gate // the frontends' admission control; nil: none
	inFlight   int
	end        int64         // the last workload's end
	loaded     bool          // assignments take no swap time (the start)
	planWall   time.Duration // wall time in the planning core
	step       hop.Stepper   // the hop step's scratch
	children   []int         // one item's sub-requests' child tasks (indices in Emulated's order)
	routeDraws replay        // their routing draws, taken from rng in the order the simulator always took them
	routeRand  *rand.Rand    // routeDraws, for the hop step
	// freeMsgs and freeReqs are messages and requests done with, reused so that the per-item path allocates
	// nothing (newMessage, newRequest).
	freeMsgs []int32 // by id (sim.msgs): a slice of pointers copied per batch was a write barrier per message
	freeReqs []*request
	msgs     []*message // every message, by id (events name them by id); msgs[0] is none
	// beat and looks are the counters' heartbeat and the tuner's view of the queues, reused (heartbeats, tuneLook)
	beat  map[string]wire.Observed
	looks map[string]map[string]float64
	// policyErr is what computing routing_mode ramsis's policies failed with (the run fails with it).
	policyErr error
	backlog   [4]time.Duration // the root's ramsis choice's scratch
}

func newSim(cfg Config) (*sim, error) {
	served, err := cfg.served()
	if err != nil {
		return nil, err
	}
	cluster := cfg.Cluster
	if len(cluster) == 0 {
		cluster = plan.Uniform(cfg.Servers)
	}
	if cluster.Total() <= 0 {
		return nil, fmt.Errorf("sim: %d servers: want at least 1", cluster.Total())
	}
	s := &sim{cfg: cfg, cluster: cluster, rng: rand.New(rand.NewPCG(cfg.Seed, 0x51a)), named: map[string]*pipe{},
		assign: map[string]plan.Assignment{}, msgs: []*message{nil}}
	for i, sv := range served {
		p, err := s.addPipe(sv, cfg.Seed+uint64(i)*0x632be59bd9b4e019) // the first pipeline keeps cfg's seed
		if err != nil {
			return nil, err
		}
		s.end = max(s.end, p.end)
	}
	for _, p := range s.pipes {
		p.trie = newPathTrie(p.spec, s.queues)
	}
	s.routeRand = rand.New(&s.routeDraws)
	if cfg.Admit {
		s.gate = admission.New(admission.Config{})
	}
	if err := s.startCore(); err != nil {
		return nil, err
	}
	s.servers = make([]server, cluster.Total())
	for _, sc := range cluster { // the servers class by class, in the cluster's order
		for range sc.Servers {
			s.names = append(s.names, fmt.Sprintf("w%04d", len(s.names)))
			s.classOf = append(s.classOf, sc.Name)
			if sc.Name != wire.DefaultClass {
				if s.classes == nil {
					s.classes = map[string]string{}
				}
				s.classes[s.names[len(s.names)-1]] = sc.Name
			}
		}
	}
	for i := range s.servers {
		s.servers[i].queue = -1
	}
	s.loaded = true // the workers start with the static plans' variants loaded
	for _, p := range s.pipes {
		s.applyPlan(p, p.core.Current(), false)
	}
	s.assignWorkers()
	s.loaded = false
	for i, p := range s.pipes {
		if at, ok := p.arr.Next(); ok {
			s.push(event{at: int64(at), kind: evArrival, target: int32(i)})
		}
	}
	s.push(event{at: int64(time.Second), kind: evTick})
	if s.core.Tunes() {
		s.push(event{at: int64(s.core.TuneEvery()), kind: evTune})
	}
	return s, nil
}

// addPipe adds a pipeline and its queues (its variants' emulated executors seeded from the number of queues before
// them, so that one pipeline runs as it always did).
func (s *sim) addPipe(sv Served, seed uint64) (*pipe, error) {
	switch {
	case sv.Spec == nil:
		return nil, errors.New("sim: no pipeline")
	case sv.Workload == nil:
		return nil, fmt.Errorf("sim: no workload for pipeline %s", sv.Spec.Name)
	case s.named[sv.Spec.Name] != nil:
		return nil, fmt.Errorf("sim: pipeline %s given twice", sv.Spec.Name)
	}
	if err := sv.Workload.Validate(); err != nil {
		return nil, fmt.Errorf("sim: pipeline %s: %w", sv.Spec.Name, err)
	}
	name, solve := s.cfg.System, s.cfg.Control
	if name == "" {
		name = "loki"
	}
	if solve.SolveWorkers == 0 {
		solve.SolveWorkers = 1
	}
	check := &Checker{CommLatency: s.cfg.CommLatency, Seed: s.cfg.Seed, TuneEvery: s.cfg.Control.TuneEvery}
	solve.Checker = check
	system, err := control.ParseSystem(name, sv.Spec, solve)
	if err != nil {
		return nil, err
	}
	check.Policy = system.Policy
	if control.PlansOnTrace(name) { // InferLine's planning trace: the same workload, arrivals of another seed
		solve.Traces = control.TraceSet{sv.Spec.Name: planningTrace(sv.Workload, seed)}
		if system, err = control.ParseSystem(name, sv.Spec, solve); err != nil {
			return nil, err
		}
	}
	spec := sv.Spec
	p := &pipe{spec: spec, work: sv.Workload, arr: sv.Workload.Arrivals(seed), system: system,
		queueIdx: map[string]map[string]int32{}, slo: int64(spec.SLOMs * float64(time.Millisecond)),
		end: int64(sv.Workload.Duration()), comm: int64(s.cfg.CommLatency)}
	if s.cfg.CommLatency < 0 {
		p.comm = int64(spec.CommLatencyMs * float64(time.Millisecond))
	}
	p.seconds = make([]Second, (p.end+int64(time.Second)-1)/int64(time.Second))
	p.joinIdx = map[string]int{}
	for ti := range spec.Tasks {
		t := &spec.Tasks[ti]
		p.tasks = append(p.tasks, t.Name)
		p.joinOf = append(p.joinOf, spec.JoinAfter(t.Name))
		if t.Join != nil {
			p.joinIdx[t.Name] = len(p.joinIdx)
		}
		p.queueIdx[t.Name] = map[string]int32{}
		for vi := range t.Variants {
			v := &t.Variants[vi]
			served := wire.VariantKey{Task: t.Name, Variant: v.Name}.In(spec.Name)
			e := emulated.New(spec, t.Name, v, s.cfg.Seed^uint64(len(s.queues)+1)*0x9e3779b97f4a7c15)
			h := &variantQueue{pipe: p, name: served.Key().String(), task: ti, variant: v, exec: e,
				children: e.Children(), key: served.String()}
			h.emitted = make([]uint64, len(h.children))
			p.queueIdx[t.Name][v.Name] = int32(len(s.queues))
			s.queues = append(s.queues, h)
		}
	}
	p.rootIdx = p.queueIdx[spec.Root().Name]
	for _, h := range s.queues {
		if h.pipe != p {
			continue
		}
		h.childQueues = make([][]namedQueue, len(h.children))
		for c, child := range h.children {
			for _, v := range spec.Task(child).Variants {
				h.childQueues[c] = append(h.childQueues[c], namedQueue{v.Name, p.queueIdx[child][v.Name]})
			}
		}
	}
	s.pipes = append(s.pipes, p)
	s.named[spec.Name] = p
	return p, nil
}

// startCore starts the planning core as the planner starts: each pipeline on its first plan.
func (s *sim) startCore() error {
	specs := make([]*pipeline.Spec, len(s.pipes))
	systems := make([]control.System, len(s.pipes))
	for i, p := range s.pipes {
		specs[i], systems[i] = p.spec, p.system
	}
	if err := s.cfg.Control.CheckCostCap(len(specs), s.cfg.Cluster.Priced()); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	c, err := core.New(specs, systems, core.Config{Control: s.cfg.Control, DemandAlpha: s.cfg.DemandAlpha,
		LatencyMaxAge: reportMaxAge})
	if err != nil {
		return err
	}
	s.core = c
	for i, p := range s.pipes {
		initial, err := control.FirstPlan(p.spec)
		if err != nil {
			return err
		}
		initial.Epoch = 1
		p.core = c.Pipelines()[i]
		if err := c.Begin(p.core, initial, false, s.time()); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	if e.kind == evDeliver {
		s.queues[e.target].transit += float64(s.msgs[e.msg].items)
	}
	s.events.push(e)
}
