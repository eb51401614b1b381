package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// Checker is the plan check (control.Checker): it simulates a routed plan, fixed (no control loop: its tuner alone
// runs, as it does between plans), with the simulator's own data plane, over a short horizon on arrivals replayed from the observed gaps and sub-requests
// drawn from the observed distributions (the profiled ones where none was observed), from idle queues.
type Checker struct {
	// Policy is the workers' deadline policy.
	Policy deadline.Policy
	// Horizon is the time measured after Warmup (defaults 6 s and 1 s); at a low demand it stretches to
	// MinRequests arrivals (default 1000), at most 60 s, so that one late request is not a tenth of a point.
	Horizon, Warmup time.Duration
	MinRequests     int
	// Replications is how many runs of other draws are averaged (default 3): a fan-out with a heavy tail (the
	// traffic camera's) gave one plan 0.7%, 0.7% and 2.0% in three runs of 6 s.
	Replications int
	// CommLatency is one hop's latency; negative: the spec's.
	CommLatency time.Duration
	// Seed seeds the check's draws: the same plan and traffic give the same prediction.
	Seed uint64
	// TuneEvery is the tuner's (control.Config.TuneEvery; negative: none). Its loans move workers between
	// variants, and a check without them missed what they cost: on the traffic camera at 63 QPS a plan predicted
	// at 0.7% missed 2.5% with the tuner, 0.3% without.
	TuneEvery time.Duration
}

// Check simulates p for o (control.Checker): Replications runs of different draws, whose mean violation ratio is
// the prediction and whose spread its standard error.
func (c Checker) Check(spec *pipeline.Spec, p *plan.Plan, o control.Observed) (control.Prediction, error) {
	if o.Demand <= 0 || math.IsNaN(o.Demand) || math.IsInf(o.Demand, 0) {
		return control.Prediction{}, errors.New("no demand to check a plan at")
	}
	reps := c.Replications
	if reps <= 0 {
		reps = 3
	}
	pred := control.Prediction{Queues: map[string]float64{}}
	ratios := make([]float64, reps)
	for i := range ratios {
		r, err := c.replicate(spec, p, o, c.Seed+uint64(i)*0x9e3779b9, pred.Queues)
		if err != nil {
			return control.Prediction{}, err
		}
		ratios[i], pred.Requests, pred.Poisson = r.SLOViolationRatio, pred.Requests+r.Requests, r.poisson
		pred.ViolationRatio += r.SLOViolationRatio / float64(reps)
	}
	if reps > 1 {
		v := 0.0
		for _, r := range ratios {
			v += (r - pred.ViolationRatio) * (r - pred.ViolationRatio)
		}
		pred.StdErr = math.Sqrt(v / float64(reps-1) / float64(reps))
	}
	return pred, nil
}

type replication struct {
	Summary
	poisson bool
}

// replicate is one run of a check with seed; queues keeps each hop's longest queue.
func (c Checker) replicate(spec *pipeline.Spec, p *plan.Plan, o control.Observed, seed uint64,
	queues map[string]float64) (replication, error) {
	horizon, warm, minReq := c.Horizon, c.Warmup, c.MinRequests
	if horizon <= 0 {
		horizon = 6 * time.Second
	}
	if warm <= 0 {
		warm = time.Second
	}
	if minReq <= 0 {
		minReq = 1000
	}
	horizon = min(max(horizon, time.Duration(float64(minReq)/o.Demand*float64(time.Second))), time.Minute)
	// Whole seconds: the simulator counts requests by the second they arrived in.
	total := (warm + horizon + time.Second - 1).Truncate(time.Second)
	w := workload.Constant(o.Demand, total)
	var gaps [][]time.Duration
	if o.Traffic != nil {
		gaps = o.Traffic.Gaps
	}
	w.Times = replayGaps(gaps, o.Demand, total, seed)
	servers := o.Servers
	if a := p.Allocation; a != nil {
		servers = max(servers, a.ActiveServers)
	}
	s, err := newSim(Config{Spec: spec, Workload: w, Servers: max(servers, 1), Cluster: checkCluster(p, o),
		System: "static:" + string(c.Policy),
		Seed:   seed, Control: control.Config{TuneEvery: c.TuneEvery, ProfilesOnly: true}, CommLatency: c.CommLatency,
		Warmup: warm.Truncate(time.Second)})
	if err != nil {
		return replication{}, err
	}
	if err := s.fix(p, o); err != nil {
		return replication{}, err
	}
	s.run()
	pp := s.pipes[0]
	for _, h := range s.queues {
		if vp := p.Find(pp.tasks[h.task], h.variant.Name); vp != nil && vp.Replicas > 0 && vp.MaxBatch > 0 {
			queues[h.name] = max(queues[h.name], h.peak/float64(vp.Replicas*vp.MaxBatch))
		}
	}
	return replication{Summary: s.result(pp).Summary, poisson: w.Times == nil}, nil
}

// fix makes the simulation a check of plan p: no control loop (no ticks: the events newSim queued are dropped, but
// the tuner's looks), a planning core that starts from p as a resumed one does (the tuner's demand estimate is p's),
// the workers given p's replicas already loaded, items emitting what o.Traffic observed, and the queues' peaks
// recorded.
func (s *sim) fix(p *plan.Plan, o control.Observed) error {
	s.events = eventHeap{}
	pp := s.pipes[0]
	pp.sent = deliveries{}
	s.core = nil
	if err := s.startCore(); err != nil {
		return err
	}
	pp.core = s.core.Pipelines()[0]
	resumed := *p
	if a := p.Allocation; a != nil {
		ac := *a
		ac.EstimateQPS = o.Demand // the tuner's estimate
		resumed.Allocation = &ac
	}
	if err := s.core.Restart(pp.core, &resumed, s.time()); err != nil {
		return err
	}
	if s.core.Tunes() {
		s.push(event{at: int64(s.core.TuneEvery()), kind: evTune})
	}
	s.loaded = true
	s.applyPlan(pp, &resumed, true)
	s.assignWorkers()
	s.loaded = false
	if o.Traffic != nil {
		for _, h := range s.queues {
			// The observed histogram counts every sub-request of an item, parallel copies too: only a task
			// without parallel children draws its fan-out from it.
			if d, ok := o.Traffic.SubRequests[h.name]; ok && len(h.children) > 0 && len(h.exec.Parallel()) == 0 {
				h.draw = &d
			}
		}
	}
	pp.arr = pp.work.Arrivals(s.cfg.Seed)
	if at, ok := pp.arr.Next(); ok {
		s.push(event{at: int64(at), kind: evArrival})
	}
	return nil
}

// subRequests draws how many sub-requests an item of h emits to its shared children: from the observed distribution
// in a check, else as the variant's emulated executor does.
func (s *sim) subRequests(h *variantQueue) int {
	var k int
	if d := h.draw; d != nil {
		u := s.rng.Float64()
		k = len(d.Weights) - 1
		for i, w := range d.Weights {
			if u < w {
				k = i
				break
			}
			u -= w
		}
		if k == wire.MaxSubRequestBuckets-1 {
			k = int(math.Round(d.TailMean))
		}
	} else {
		k = h.exec.SubRequests(s.rng)
	}
	return k
}

// replayGaps are the arrival times, over d, of the frontends' gap samples replayed at demand qps: each frontend's
// stream keeps its share of the observed rate and the shape of its gaps, cycled from a seeded offset, and the
// streams are merged. Nil when no gaps were observed (the check then draws Poisson arrivals).
func replayGaps(streams [][]time.Duration, qps float64, d time.Duration, seed uint64) []time.Duration {
	rate := 0.0 // observed requests per second, summed over the streams
	for _, g := range streams {
		if m := meanGap(g); m > 0 {
			rate += 1 / m.Seconds()
		}
	}
	if rate <= 0 {
		return nil
	}
	scale := rate / qps
	rng := rand.New(rand.NewPCG(seed, 0x9a9))
	var out []time.Duration
	for _, g := range streams {
		if meanGap(g) <= 0 {
			continue
		}
		i := rng.IntN(len(g))
		for t := time.Duration(float64(g[i]) * scale * rng.Float64()); t < d; {
			out = append(out, t)
			i = (i + 1) % len(g)
			t += time.Duration(float64(g[i]) * scale)
		}
	}
	slices.Sort(out)
	return out
}

func meanGap(g []time.Duration) time.Duration {
	if len(g) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range g {
		sum += x
	}
	return sum / time.Duration(len(g))
}

// noteCheck records what the plan check did to a new allocation of p, for the summary.
func (p *pipe) noteCheck(pl *plan.Plan) {
	if pl.Allocation == nil || pl.Allocation.Check == nil {
		return
	}
	p.checkPredicted = pl.Allocation.Check.ViolationRatio
	if pl.Allocation.Check.Changed {
		p.checkChanged++
	}
}

// checkCluster is the cluster a check of p runs on: o's classes, each with at least the servers p uses of it; nil
// for a cluster of one kind (Config.Servers).
func checkCluster(p *plan.Plan, o control.Observed) plan.Cluster {
	if len(o.Cluster) == 0 {
		return nil
	}
	used := p.ServersByClass()
	counts := map[string]int{}
	prices := plan.Prices{}
	for _, sc := range o.Cluster {
		counts[sc.Name], prices[sc.Name] = sc.Servers, sc.PricePerHour
	}
	for class, n := range used {
		counts[class] = max(counts[class], n)
	}
	return plan.NewCluster(counts, prices)
}
