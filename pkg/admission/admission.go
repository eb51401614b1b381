// Package admission is the frontends' admission control: which requests to send into a pipeline and which to refuse
// at once, before they cost model time, when a request cannot meet its deadline or the pipeline is answering fewer
// requests in time than it is sent. Pure: time is passed in, no NATS.
//
// It admits on what the workers answer, not on the plan's figure (docs/admission.md says why each part is built so):
//
//  0. A pipeline the plan in force hosts no variant of some task of (a joint plan shed it) has its requests
//     refused at once (unhosted), as demand still.
//  1. Deadline. A request whose deadline is nearer than the plan's fastest path (each task's fastest hosted variant
//     at batch 1, and a hop each) cannot be in time on any path: refused at once, whatever the load.
//  2. Congestion. While more than TargetViolations of the recent answers (over Window) were violations (late,
//     dropped, partial, degraded), the pipeline is congested, and the requests in flight (the frontend's own,
//     admitted and not answered) are bounded by what it answers: LimitShare of the time to the request's deadline
//     at the rate the workers answer now (their answers over RateWindow, late ones too, dropped ones not: the
//     throughput). By Little's law the requests admitted under it expect to spend LimitShare of their time in the
//     system; the share is steered down from it while more than BoundViolations of the answers to the requests
//     the bound admitted are violations (the tail Little's law leaves), never under the pipeline's fill. The bound
//     is recomputed at every decision from the answers, so a cluster the tuner or a new plan grew is admitted more
//     as soon as it answers more (and its queues drain faster, freeing room at once); it is no remembered limit
//     that has to grow back. Congestion ends when the bound has refused nothing for a RateWindow. A pipeline that
//     misses no deadlines is never bounded: at the loads the cluster serves, nothing is refused but what its
//     deadline rules out.
//  3. Overrun. A pipeline whose requests in flight would take more than OverrunFactor of a request's time to its
//     deadline at the rate the workers answered over the last RateWindow/5 is congested at once, before any of its
//     answers is late: a load many times what the plan in force serves (a cold start far above the cluster's
//     capacity) is seen at its first answers rather than an SLO later, when the requests admitted meanwhile are lost.
//  4. Ceiling. Requests in flight beyond what the plan's variants answer on the cluster's servers (the tuner lends
//     any worker no plan uses to them at once) by the request's deadline are refused at once: no answer is needed to
//     know it, so a load far above the cluster is bounded from its first request, before any answer shows it (a
//     cold start at 1,600 QPS had 629 requests in flight when its first answers came). Never a load the cluster
//     answers in time without a new plan: by Little's law, its requests in flight are at most that rate times the
//     time they take. Less, by the pipeline's fill at that rate, for requests not yet in the pipeline's batches:
//     in a cold start every request admitted waits for the first batches (Gate.ceiling).
//
// Within the bound, higher classes are served first: a class may fill the bound but for the share of the
// throughput the classes above it ask for (their recent arrival rate over it).
package admission

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// Reasons a request is refused (the metrics' reason label).
const (
	ReasonRate     = "rate"     // the pipeline is congested, and the request is beyond what it answers in time
	ReasonDeadline = "deadline" // its deadline is nearer than the plan's fastest path
	ReasonUnhosted = "unhosted" // the plan in force hosts no variant of one of the pipeline's tasks
	// ReasonAccuracy: the plan in force cannot serve the demand at the pipeline's accuracy floor (min_accuracy),
	// and the request is beyond the share it serves at it.
	ReasonAccuracy = "accuracy"
)

// Reasons lists every reason a request is refused.
var Reasons = []string{ReasonRate, ReasonDeadline, ReasonUnhosted, ReasonAccuracy}

// Config tunes a Gate; the zero value takes the defaults.
type Config struct {
	// Window is the time constant of the counts a gate keeps of arrivals per class and of answers and their
	// violations; default 2 s.
	Window time.Duration
	// RateWindow is the time constant of the rate the pipeline answers at (its throughput, what bounds the requests
	// in flight while it is congested); default 0.5 s: a cluster the tuner or a plan grew is read within it.
	RateWindow time.Duration
	// LimitShare is, while the pipeline is congested, the share of its time to the deadline a request admitted may
	// expect to spend in the system (the requests in flight over the rate answered: Little's law); default 0.65. At
	// 0.7, 1.1% of the requests admitted at twice the traffic example's capacity were late (the simulator, and live
	// on 6 workers); at 0.6 the live cluster answered 90-92% of its capacity in time there, and a bound under the
	// pipeline's own latency only shrinks, since the rate answered follows what is admitted (0.4 refused 18% of
	// the step to 600 QPS). docs/admission.md has the figures.
	LimitShare float64
	// MinLimit is the fewest requests in flight the limit allows (default 4).
	MinLimit float64
	// OverrunFactor: a pipeline whose requests in flight, at the rate it answered over the last RateWindow/5 (at
	// least MinLimit answers), would take more than OverrunFactor times a request's time to its deadline is congested
	// before any answer is late (default 5). The rate of a cold start that the cluster serves lags its arrivals
	// while the tuner lends servers and the planner re-plans: at 0.1 then 200 QPS on 20 workers the requests in
	// flight came to 3.2 times the deadline at it; at 1,600 QPS, 6-10 times from the first answers.
	OverrunFactor float64
	// TargetViolations is the share of recent answers (over Window) that may be violations before the pipeline is
	// taken for congested (default 0.03): the odd late request of a pipeline that is not, and the few a re-plan
	// drops, limit nothing (docs/admission.md).
	TargetViolations float64
	// BoundViolations is the share of the answers to requests admitted under the bound that may be violations
	// (default 0.005): the bound's share is steered to it from LimitShare down (steer). Little's law holds the
	// requests' mean time in the system at the share; this holds their tail, which batches, re-plans and a machine
	// the processes share spread (live, the ok answers' p50 at 0.65 of the deadline had a p99 at 0.97).
	BoundViolations float64
	// MinLimitShare is the least share the steering takes the bound to (default 0.55). The steering moves it down
	// only while the plan in force is overloaded (Plan.Overloaded): under a plan that serves the demand, violations
	// are of a slowdown the planner has not planned for yet, and a smaller share would cut the queues it learns the
	// slowdown from (steering there down to 0.5, the simulated slowed server of TestAdmissionAtASlowedServer
	// refused 1.6% where it refuses none). The bound never goes under the pipeline's fill either (bound). Live,
	// 0.6 held the tail of a plan whose batches spread its answers (1.5-1.9% of the admitted late at 1,600 QPS);
	// six workers at twice their capacity missed 95% of it in some runs at 0.5 and 0.55 alike (docs/admission.md).
	MinLimitShare float64
}

// Defaults of Config.
const (
	DefaultWindow     = 2 * time.Second
	DefaultRateWindow = 500 * time.Millisecond
	DefaultLimitShare = 0.65
	DefaultMinLimit   = 4
	DefaultTarget     = 0.03
	DefaultOverrun    = 5
	DefaultBoundViol  = 0.005
	DefaultMinShare   = 0.55
	// shareStep is what a violation under the bound takes from its share: 0.65 to the floor, 0.55, in 5.
	shareStep = 0.02
	// overloadedBy is how far the arrivals must be beyond the rate answered for a violation to steer the share.
	overloadedBy = 1.25
	// minViolations is the weight of recent violations below which none makes a pipeline congested: at a few
	// requests a second one late answer is more than 3% of them.
	minViolations = 3
)

// Plan is what a gate needs of the plan in force for a pipeline (Of builds it).
type Plan struct {
	// Hosted says the plan hosts a variant of every task: a pipeline the plan gives no server (a joint plan shed
	// it) has its requests refused at once, as demand still (Reasons: unhosted); UnhostedTask names a task it does
	// not host, for the refusal's reason.
	Hosted       bool
	UnhostedTask string
	// FastestMs is the latency of the plan's fastest path: each task's fastest hosted variant at batch 1 and the
	// communication latency of each hop, along the slowest chain.
	FastestMs float64
	// CeilingQPS is the most requests a second the plan's variants answer in time on the cluster's servers, the
	// tuner's loans included (ceilingQPS); 0: none known. Requests in flight beyond it times a request's time to its
	// deadline are refused, answers or none (the ceiling, part 4 of the rule).
	CeilingQPS float64
	// CeilingFillMs is a request's time through the pipeline at CeilingQPS: the slowest chain of the variants
	// counted there, each at its MaxBatch. A request waits behind the requests in flight that have not reached the
	// pipeline's last batch yet: all of them in a cold start, where none is answered yet.
	CeilingFillMs float64
	// FloorShortfall is the share of the demand the plan cannot serve at the pipeline's accuracy floor (1 less
	// plan.FloorShare): 0 but for a plan that cannot serve the demand at it, whose requests beyond the rest are
	// refused.
	FloorShortfall float64
	// Overloaded says the planner found the servers cannot serve the demand (plan.ModeOverloaded): the bound's
	// share is steered down only then (steer).
	Overloaded bool
}

// Request is one arrival to decide on.
type Request struct {
	Pipeline string
	Class    int // 0 .. pipeline.MaxPriority
	Now      time.Time
	Deadline time.Time
}

// Decision is what becomes of a request. A refused one carries its reason and a sentence for the client.
type Decision struct {
	Admit  bool
	Reason string
	Detail string
}

// Outcome is how an admitted request ended, as the gate learns from it.
type Outcome int

// Outcomes.
const (
	// InTime: answered ok.
	InTime Outcome = iota
	// Late: answered after its deadline, or partial, or degraded: the workers served it, not as asked.
	Late
	// Dropped: answered dropped: no model served it.
	Dropped
	// Withdrawn: refused after admission (a bound further on), never sent: it says nothing of the pipeline.
	Withdrawn
)

// Gate decides per pipeline and class. Safe for concurrent use.
type Gate struct {
	cfg   Config
	mu    sync.Mutex
	pipes map[string]*pipeState
}

// pipeState is what a gate measured of one pipeline: decayed counts of recent arrivals per class and of answers,
// the rate it answers at, and the requests admitted and not yet answered.
type pipeState struct {
	arrivals [pipeline.MaxPriority + 1]decayed
	answers  decayed // every answer (Window)
	violated decayed // answers that were violations (Window)
	served   decayed // answers the workers served, late ones too: the pipeline's throughput (RateWindow)
	recent   decayed // the same over RateWindow/5, for the overrun
	inFlight int
	// congested: recent answers had more violations than the target; the requests in flight are then bounded.
	// limited is when the bound last refused a request: one RateWindow without is the end of congestion.
	congested bool
	limited   time.Time
	// since is when the congestion began; share is the bound's share of the time to the deadline, steered between
	// MinLimitShare and LimitShare by the answers to the requests admitted since (steer); overloaded is the last
	// decision's Plan.Overloaded.
	since      time.Time
	share      float64
	overloaded bool
	// floorCredit is, per class, the admissions owed under a plan's accuracy floor (beyondFloor).
	floorCredit [pipeline.MaxPriority + 1]float64
}

// New returns a gate.
func New(cfg Config) *Gate {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.RateWindow <= 0 {
		cfg.RateWindow = DefaultRateWindow
	}
	if cfg.LimitShare <= 0 || cfg.LimitShare > 1 {
		cfg.LimitShare = DefaultLimitShare
	}
	if cfg.MinLimit <= 0 {
		cfg.MinLimit = DefaultMinLimit
	}
	if cfg.OverrunFactor <= 0 {
		cfg.OverrunFactor = DefaultOverrun
	}
	if cfg.TargetViolations <= 0 {
		cfg.TargetViolations = DefaultTarget
	}
	if cfg.BoundViolations <= 0 || cfg.BoundViolations >= cfg.TargetViolations {
		cfg.BoundViolations = min(DefaultBoundViol, cfg.TargetViolations/2)
	}
	if cfg.MinLimitShare <= 0 || cfg.MinLimitShare > cfg.LimitShare {
		cfg.MinLimitShare = min(DefaultMinShare, cfg.LimitShare)
	}
	return &Gate{cfg: cfg, pipes: map[string]*pipeState{}}
}

// RefuseUnhosted refuses a request to pipeline when plan p hosts no variant of one of its tasks, admission control
// on or off: no worker would take it, and it would wait out its deadline. The caller counts it as demand, so that
// the planner's next division gives the pipeline servers.
func RefuseUnhosted(pipeline string, p Plan) (d Decision, refused bool) {
	if p.Hosted {
		return Decision{}, false
	}
	return Decision{Reason: ReasonUnhosted, Detail: fmt.Sprintf("overloaded: the plan in force gives pipeline %s "+
		"no server for task %s (the cluster has no room for it now); this request counts as its demand, and the "+
		"planner's next division gives it servers: retry in a few seconds", pipeline, p.UnhostedTask)}, true
}

// Decide admits or refuses r under plan p. An admitted request is in flight until Done.
func (g *Gate) Decide(r Request, p Plan) Decision {
	r.Class = max(0, min(r.Class, pipeline.MaxPriority))
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.pipes[r.Pipeline]
	if s == nil {
		s = &pipeState{share: g.cfg.LimitShare}
		s.answers.start, s.served.start = r.Now, r.Now
		g.pipes[r.Pipeline] = s
	}
	tau, rateTau := g.cfg.Window.Seconds(), g.cfg.RateWindow.Seconds()
	s.arrivals[r.Class].add(r.Now, tau, 1)
	s.overloaded = p.Overloaded
	if d, refused := RefuseUnhosted(r.Pipeline, p); refused {
		return d
	}
	left := r.Deadline.Sub(r.Now)
	fastest := time.Duration(p.FastestMs * float64(time.Millisecond))
	if left < fastest {
		return Decision{Reason: ReasonDeadline, Detail: fmt.Sprintf("overloaded: %v to the deadline is less than "+
			"the %v of pipeline %s's fastest path", left.Round(time.Millisecond), fastest.Round(time.Millisecond),
			r.Pipeline)}
	}
	if d, refused := s.beyondFloor(r, p, tau); refused {
		return d
	}
	if p.CeilingQPS > 0 {
		ceiling := max(g.cfg.MinLimit, s.ceiling(r.Now, left, p, rateTau))
		if float64(s.inFlight) >= ceiling*s.classRoom(r.Class, r.Now, tau, p.CeilingQPS) {
			return Decision{Reason: ReasonRate, Detail: fmt.Sprintf("overloaded: pipeline %s has %d requests in "+
				"flight, as many of class %d as its plan answers (%.0f a second on all its servers) by this "+
				"request's deadline; retry later", r.Pipeline, s.inFlight, r.Class, p.CeilingQPS)}
		}
	}
	if s.congested && r.Now.Sub(s.limited) > g.cfg.RateWindow {
		s.congested = false // the bound has not refused for a RateWindow: what comes is answered as it comes
	}
	if !s.congested && g.overrun(s, r.Now, left) {
		s.congest(g.cfg, r.Now)
	}
	if s.congested {
		rate := s.served.rate(r.Now, rateTau)
		limit := max(g.cfg.MinLimit, g.bound(s, left, p)*rate)
		if float64(s.inFlight) >= limit*s.classRoom(r.Class, r.Now, tau, rate) {
			s.limited = r.Now
			return Decision{Reason: ReasonRate, Detail: fmt.Sprintf("overloaded: pipeline %s has %d requests in "+
				"flight, as many of class %d as it answers (%.0f a second) in time now; retry later", r.Pipeline,
				s.inFlight, r.Class, rate)}
		}
	}
	s.inFlight++
	return Decision{Admit: true}
}

// Done records how a request of pipeline that Decide admitted at admitted ended, at now.
func (g *Gate) Done(pipelineName string, admitted, now time.Time, o Outcome) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.pipes[pipelineName]
	if s == nil || s.inFlight == 0 {
		return
	}
	s.inFlight--
	if o == Withdrawn {
		return
	}
	tau := g.cfg.Window.Seconds()
	s.answers.add(now, tau, 1)
	if s.congested && !admitted.Before(s.since) {
		g.steer(s, now, o == InTime) // admitted under the bound: its answer says what the share is worth
	}
	if o != Dropped {
		s.served.add(now, g.cfg.RateWindow.Seconds(), 1)
		s.recent.add(now, g.cfg.RateWindow.Seconds()/5, 1)
	}
	if o == InTime {
		return
	}
	s.violated.add(now, tau, 1)
	if v := s.violated.at(now, tau); !s.congested && v >= minViolations && v > g.cfg.TargetViolations*s.answers.at(now, tau) {
		// Congested: from now on the requests in flight are bounded by what the pipeline answers, until the bound
		// has refused none for a RateWindow.
		s.congest(g.cfg, now)
	}
}

// congest bounds s's requests in flight from now, at the share it starts at: what an earlier congestion learned of
// its share is of another load.
func (s *pipeState) congest(cfg Config, now time.Time) {
	s.congested, s.limited, s.since, s.share = true, now, now, cfg.LimitShare
}

// bound is, in seconds, the time in the system the congestion bound lets the requests admitted to s expect, left
// before the deadline: its share of left, but never under the pipeline's fill at its ceiling (within LimitShare of
// left), which a request takes through the pipeline whatever the queues: below it the rate answered follows what
// is admitted down.
func (g *Gate) bound(s *pipeState, left time.Duration, p Plan) float64 {
	return max(s.share*left.Seconds(), min(p.CeilingFillMs/1000, g.cfg.LimitShare*left.Seconds()))
}

// steer moves s's bound share by an answer while the bound is in force: down by shareStep for a violation, up by
// shareStep·BoundViolations/(1−BoundViolations) for an answer in time, so that the share rests where that share of
// the answers are violations (or at LimitShare, where fewer are). Steps this small against the answers a deadline
// brings keep it from swinging: what a share admits is answered a deadline later. Down only while the plan in force
// is overloaded and the arrivals are beyond what the pipeline answers (by overloadedBy): then the violations are of
// the queues the share sets; at a load it answers, or one the planner found the servers serve, they are of its
// latency (a slowed server), which a smaller share does not shorten but starves.
func (g *Gate) steer(s *pipeState, now time.Time, inTime bool) {
	if inTime {
		p := g.cfg.BoundViolations
		s.share = min(g.cfg.LimitShare, s.share+shareStep*p/(1-p))
		return
	}
	tau := g.cfg.Window.Seconds()
	arrivals := 0.0
	for c := range s.arrivals {
		arrivals += s.arrivals[c].at(now, tau) / tau
	}
	if s.overloaded && arrivals > overloadedBy*s.served.rate(now, g.cfg.RateWindow.Seconds()) {
		s.share = max(g.cfg.MinLimitShare, s.share-shareStep)
	}
}

// ceiling is how many requests may be in flight for one admitted now, left before its deadline, to be answered in
// time under p's ceiling: at CeilingQPS C with a fill of F (CeilingFillMs), a request behind n others that have not
// entered their last batch yet is answered after n/C + F. Those in their batches are about X*F at the rate X the
// pipeline answers now (none in a cold start, C*F once it answers at C), so n is at most C*(left-F) + min(X,C)*F:
// C*left when the pipeline answers at its ceiling (Little's law), less by C*F in a cold start, when everything
// admitted waits for the first batches.
func (s *pipeState) ceiling(now time.Time, left time.Duration, p Plan, rateTau float64) float64 {
	c, fill := p.CeilingQPS, p.CeilingFillMs/1000
	x := min(s.served.rate(now, rateTau), c)
	return c*(left.Seconds()-fill) + x*fill
}

// overrun says s's requests in flight would take more than OverrunFactor times left at the rate it answered over
// the last RateWindow/5, measured on at least MinLimit answers (fewer say nothing of a rate).
func (g *Gate) overrun(s *pipeState, now time.Time, left time.Duration) bool {
	tau := g.cfg.RateWindow.Seconds() / 5
	answered := s.recent.at(now, tau)
	return answered >= g.cfg.MinLimit && float64(s.inFlight) > g.cfg.OverrunFactor*answered/tau*left.Seconds()
}

// Congested says whether pipeline's requests in flight are bounded now (its recent answers had more violations
// than the target, and the bound refused a request within the last RateWindow).
func (g *Gate) Congested(pipelineName string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.pipes[pipelineName]
	return s != nil && s.congested && now.Sub(s.limited) <= g.cfg.RateWindow
}

// InFlight is how many requests of pipeline the gate admitted that are not answered yet.
func (g *Gate) InFlight(pipelineName string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.pipes[pipelineName]; s != nil {
		return s.inFlight
	}
	return 0
}

// beyondFloor refuses r when plan p serves only a share of the demand at the pipeline's accuracy floor and r is
// beyond it: the classes from the highest down take the share's rate (the recent arrivals over every class times the
// share), a class what the ones above it leave; within a class, requests are admitted evenly, by a running credit, so
// that every frontend admits the same share without talking to the others. The planner sized the plan for that
// share: admitted past it, the routing would send the rest to variants below the floor, or late.
func (s *pipeState) beyondFloor(r Request, p Plan, tau float64) (Decision, bool) {
	if p.FloorShortfall <= 0 {
		return Decision{}, false
	}
	served := 1 - min(p.FloorShortfall, 1)
	total := 0.0
	for c := range s.arrivals {
		total += s.arrivals[c].at(r.Now, tau)
	}
	above := 0.0
	for c := r.Class + 1; c < len(s.arrivals); c++ {
		above += s.arrivals[c].at(r.Now, tau)
	}
	own := s.arrivals[r.Class].at(r.Now, tau)
	share := 0.0
	if own > 0 {
		share = max(0, min(1, (served*total-above)/own))
	}
	s.floorCredit[r.Class] = min(s.floorCredit[r.Class]+share, 1+share)
	if s.floorCredit[r.Class] >= 1 {
		s.floorCredit[r.Class]--
		return Decision{}, false
	}
	return Decision{Reason: ReasonAccuracy, Detail: fmt.Sprintf("overloaded: pipeline %s's plan serves %.0f%% of its "+
		"demand at its accuracy floor (min_accuracy), and this request is beyond it; it counts as demand: retry "+
		"later", r.Pipeline, 100*served)}, true
}

// classRoom is the share of the limit open to class's requests: all of it but what the classes above it take of
// the rate the pipeline answers (their arrival rate over that rate), so that the highest classes are served first.
func (s *pipeState) classRoom(class int, now time.Time, tau, rate float64) float64 {
	if rate <= 0 {
		return 1
	}
	above := 0.0
	for c := class + 1; c < len(s.arrivals); c++ {
		above += s.arrivals[c].at(now, tau) / tau
	}
	return max(0, 1-above/rate)
}

// decayed is a count whose past events weigh exp(-age/tau): a steady rate λ holds it at λ·tau.
type decayed struct {
	start, last time.Time
	n           float64
}

func (d *decayed) at(now time.Time, tau float64) float64 {
	if d.last.IsZero() {
		return 0
	}
	if dt := now.Sub(d.last).Seconds(); dt > 0 {
		return d.n * math.Exp(-dt/tau)
	}
	return d.n
}

func (d *decayed) add(now time.Time, tau, k float64) {
	if d.start.IsZero() {
		d.start = now
	}
	d.n = d.at(now, tau) + k
	if now.After(d.last) || d.last.IsZero() {
		d.last = now
	}
}

// rate is events per second: the count over the weight a steady rate since the start would have (tau once the
// start is windows ago), so that a young count is not read as a low rate.
func (d *decayed) rate(now time.Time, tau float64) float64 {
	if d.start.IsZero() {
		return 0
	}
	age := math.Max(now.Sub(d.start).Seconds(), 1e-3)
	return d.at(now, tau) / (tau * (1 - math.Exp(-age/tau)))
}
