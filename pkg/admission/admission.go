// Package admission is the frontends' admission control: which requests to send into a pipeline and which to refuse
// at once, before they cost model time, when the plan in force cannot serve the demand or a request's deadline
// cannot be met given the work already queued ahead of it. Pure: time and randomness are passed in, no NATS.
//
// Two rules, in order (docs/admission.md says why each is built so):
//
//  1. Rate. The plan serves ServedQPS of the EstimateQPS the planner measured across every frontend; each frontend
//     admits the same fraction ServedQPS/EstimateQPS of the requests it sees, and so, without talking to the other
//     frontends, the share of the served rate that is in proportion to what it sees. Within a frontend's share,
//     higher classes are admitted first: the classes are filled from the highest down, in the proportions of the
//     requests of each class the frontend has seen recently.
//  2. Deadline. A request whose deadline is nearer than the plan's fastest path, or than the time the work it would
//     queue behind takes to drain, is refused. The work ahead is the frontend's own requests in flight for the
//     pipeline (its share of every queue the request would join), and the rate it drains at is the rate the
//     frontend's requests of the pipeline were answered recently (Little's law: in flight / throughput is the time a
//     new request spends in the system). That estimate is a mean, and requests near it miss their deadline; so the
//     requests in flight are also bounded by a limit learned from their answers, additive increase and
//     multiplicative decrease as TCP's window: an answer in time raises it (by 1/limit, faster the longer since the
//     last cut), a request answered late or dropped (admitted after the last cut, while more than TargetViolations
//     of the recent answers are violations) cuts it to LimitCut times the lowest of the limit, what is in flight,
//     and what the pipeline answers in the time the request had. It holds the queues where the requests admitted
//     are answered in time, whatever the plan believes the cluster serves.
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
	ReasonRate     = "rate"     // beyond the frontend's share of the rate the plan serves
	ReasonDeadline = "deadline" // its deadline is nearer than the fastest path, or than the queues ahead take
)

// Reasons lists every reason a request is refused.
var Reasons = []string{ReasonRate, ReasonDeadline}

// Config tunes a Gate; the zero value takes the defaults.
type Config struct {
	// Window is the time constant of the rates a gate measures (arrivals per class, answers); default 2 s.
	Window time.Duration
	// QueueShare is how many times the time to its deadline a request may expect to spend in the system (the work
	// ahead of it drained at the rate answers come, which is the mean time in the system, Little's law) before it
	// is refused. Default 3: a pipeline planned to fill its SLO spends most of it on every request, and at 1 the
	// noise of that mean refused a fifth of the traffic camera's requests at 10% of its capacity in the simulator
	// (docs/admission.md); the learned limit keeps the queues in time, this refuses what is hopeless.
	QueueShare float64
	// LimitCut is the factor a violation cuts the limit on requests in flight by (default 0.9); MinLimit the
	// lowest limit (default 4).
	LimitCut float64
	MinLimit float64
	// TargetViolations is the share of recent answers (over Window) that may be violations before one cuts the
	// limit (default 0.03): the odd late request of a pipeline that is not congested, and the few a re-plan drops,
	// cut nothing (docs/admission.md).
	TargetViolations float64
}

// Defaults of Config.
const (
	DefaultWindow     = 2 * time.Second
	DefaultQueueShare = 3
	DefaultLimitCut   = 0.9
	DefaultMinLimit   = 4
	DefaultTarget     = 0.03
	// maxRecovery bounds the acceleration of the limit's increase (windows since the last cut).
	maxRecovery = 4
)

// Plan is what a gate needs of the plan in force for a pipeline (Of builds it).
type Plan struct {
	// ServedQPS and EstimateQPS are the rate the plan serves and the demand estimate it was made for, across every
	// frontend; either 0 (a static plan): no rate rule.
	ServedQPS, EstimateQPS float64
	// FastestMs is the latency of the plan's fastest path: each task's fastest hosted variant at batch 1 and the
	// communication latency of each hop, along the slowest chain.
	FastestMs float64
}

// Fraction is the share of the demand the plan serves: ServedQPS/EstimateQPS, at most 1; 1 when either is unknown.
func (p Plan) Fraction() float64 {
	if p.ServedQPS <= 0 || p.EstimateQPS <= 0 {
		return 1
	}
	return min(1, p.ServedQPS/p.EstimateQPS)
}

// Request is one arrival to decide on.
type Request struct {
	Pipeline string
	Class    int // 0 .. pipeline.MaxPriority
	Now      time.Time
	Deadline time.Time
	// U is a uniform draw in [0, 1): the rate rule admits a class's share of its requests at random.
	U float64
}

// Decision is what becomes of a request. A refused one carries its reason and a sentence for the client.
type Decision struct {
	Admit  bool
	Reason string
	Detail string
}

// Gate decides per pipeline and class. Safe for concurrent use.
type Gate struct {
	cfg   Config
	mu    sync.Mutex
	pipes map[string]*pipeState
}

// pipeState is what a gate measured of one pipeline: decayed counts of recent arrivals per class and of answers, and
// the requests admitted and not yet answered.
type pipeState struct {
	since    time.Time // the first request
	arrivals [pipeline.MaxPriority + 1]decayed
	answers  decayed // counted from since
	violated decayed // answers that were violations
	inFlight int
	// limit bounds inFlight once a violation set it (0: no bound yet); cut is when it was last cut.
	limit float64
	cut   time.Time
}

// New returns a gate.
func New(cfg Config) *Gate {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.QueueShare <= 0 {
		cfg.QueueShare = DefaultQueueShare
	}
	if cfg.LimitCut <= 0 || cfg.LimitCut >= 1 {
		cfg.LimitCut = DefaultLimitCut
	}
	if cfg.MinLimit <= 0 {
		cfg.MinLimit = DefaultMinLimit
	}
	if cfg.TargetViolations <= 0 {
		cfg.TargetViolations = DefaultTarget
	}
	return &Gate{cfg: cfg, pipes: map[string]*pipeState{}}
}

// Decide admits or refuses r under plan p. An admitted request is in flight until Done.
func (g *Gate) Decide(r Request, p Plan) Decision {
	if r.Class < 0 || r.Class > pipeline.MaxPriority {
		r.Class = max(0, min(r.Class, pipeline.MaxPriority))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.pipes[r.Pipeline]
	if s == nil {
		s = &pipeState{since: r.Now}
		s.answers.start = r.Now
		g.pipes[r.Pipeline] = s
	}
	tau := g.cfg.Window.Seconds()
	var shares [pipeline.MaxPriority + 1]float64
	total := 0.0
	for c := range s.arrivals {
		a := &s.arrivals[c]
		if c == r.Class {
			a.add(r.Now, tau, 1)
		}
		shares[c] = a.at(r.Now, tau)
		total += shares[c]
	}
	if u, share := r.U, classShare(shares[:], total, r.Class, p.Fraction()); u >= share {
		return Decision{Reason: ReasonRate, Detail: fmt.Sprintf("overloaded: the plan serves %.0f of the %.0f "+
			"requests a second asked of pipeline %s; class %d is admitted at %.0f%% now; retry later",
			p.ServedQPS, p.EstimateQPS, r.Pipeline, r.Class, 100*share)}
	}
	left := r.Deadline.Sub(r.Now)
	fastest := time.Duration(p.FastestMs * float64(time.Millisecond))
	if left < fastest {
		return Decision{Reason: ReasonDeadline, Detail: fmt.Sprintf("overloaded: %v to the deadline is less than "+
			"the %v of pipeline %s's fastest path", left.Round(time.Millisecond), fastest.Round(time.Millisecond),
			r.Pipeline)}
	}
	if wait, ok := s.sojourn(r.Now, tau, left); ok && wait > g.cfg.QueueShare*left.Seconds() {
		return Decision{Reason: ReasonDeadline, Detail: fmt.Sprintf("overloaded: the %d requests ahead in pipeline "+
			"%s take about %v to be answered, too long for the %v to the deadline; retry later", s.inFlight,
			r.Pipeline, time.Duration(wait*float64(time.Second)).Round(time.Millisecond), left.Round(time.Millisecond))}
	}
	if s.limit > 0 && float64(s.inFlight) >= s.limit {
		return Decision{Reason: ReasonDeadline, Detail: fmt.Sprintf("overloaded: pipeline %s has %d requests in "+
			"flight, as many as it answers in time now; retry later", r.Pipeline, s.inFlight)}
	}
	s.inFlight++
	return Decision{Admit: true}
}

// Done records the answer, at now, to a request of pipeline admitted at admitted; violated: it was late, or
// dropped in part or whole (not an answer in time).
func (g *Gate) Done(pipelineName string, admitted, now time.Time, violated bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.pipes[pipelineName]
	if s == nil || s.inFlight == 0 {
		return
	}
	s.inFlight--
	tau := g.cfg.Window.Seconds()
	s.answers.add(now, tau, 1)
	if violated {
		s.violated.add(now, tau, 1)
	}
	switch {
	case violated && admitted.After(s.cut) && s.violated.at(now, tau) > g.cfg.TargetViolations*s.answers.at(now, tau):
		// One cut per round: the requests admitted before it were admitted under the old limit, and their
		// violations say nothing of the new one.
		// From what is in flight, at most (a limit far above it has not bound), and from what the pipeline
		// answers in the time the request had (Little's law: more in flight waits longer than that).
		limit := min(float64(s.inFlight+1), s.answers.rate(now, tau)*now.Sub(admitted).Seconds())
		if s.limit > 0 {
			limit = min(limit, s.limit)
		}
		s.limit = max(g.cfg.MinLimit, limit*g.cfg.LimitCut)
		s.cut = now
	case !violated && s.limit > 0 && float64(s.inFlight+1) >= s.limit/2:
		// Raised only while it binds, or nearly: a limit far above what is in flight has not been tested. The
		// longer since the last cut, the faster (1 a round, and 1 more for every window): a limit cut while the
		// cluster was small (a cold start) catches up with the plan that grew it within seconds, and one near the
		// pipeline's capacity probes it gently.
		s.limit += (1 + min(now.Sub(s.cut).Seconds()/tau, maxRecovery)) / s.limit
	}
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

// classShare is the share of class's requests to admit when a fraction of all of them is served: the classes above
// it are served first, each in the proportion of the requests it has (counts, summing to total), and class gets what
// is left, up to all of its own.
func classShare(counts []float64, total float64, class int, fraction float64) float64 {
	if fraction >= 1 || total <= 0 {
		return 1
	}
	left := fraction * total
	for c := len(counts) - 1; c > class; c-- {
		left -= counts[c]
	}
	if left <= 0 || counts[class] <= 0 {
		return 0
	}
	return min(1, left/counts[class])
}

// sojourn is how long a request admitted now, with left to its deadline, would spend in the system (Little's law):
// the requests in flight over the rate answers came since the pipeline's first request. ok is false while nothing is
// in flight, or before a window and left have passed since that first request: every request is answered by its
// deadline, so until then a slow pipeline cannot be told from one that does not answer.
func (s *pipeState) sojourn(now time.Time, tau float64, left time.Duration) (seconds float64, ok bool) {
	if s.inFlight == 0 || now.Sub(s.since).Seconds() < tau || now.Sub(s.since) < left {
		return 0, false
	}
	rate := s.answers.rate(now, tau)
	if rate <= 0 {
		return math.Inf(1), true
	}
	return float64(s.inFlight) / rate, true
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
