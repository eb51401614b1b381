package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// Checker is the plan check (control.Checker): it simulates a routed plan, fixed (no control loop, no tuner), with
// the simulator's own data plane, over a short horizon on arrivals replayed from the observed gaps and sub-requests
// drawn from the observed distributions (the profiled ones where none was observed), from idle queues.
type Checker struct {
	// Policy is the workers' deadline policy.
	Policy deadline.Policy
	// Horizon is the time measured after Warmup (defaults 4 s and 1 s); at a low demand it stretches to
	// MinRequests arrivals (default 400), at most 60 s, so that one late request is not a point of violations.
	Horizon, Warmup time.Duration
	MinRequests     int
	// CommLatency is one hop's latency; negative: the spec's.
	CommLatency time.Duration
	// Seed seeds the check's draws: the same plan and traffic give the same prediction.
	Seed uint64
}

// Check simulates p for o (control.Checker).
func (c Checker) Check(spec *pipeline.Spec, p *plan.Plan, o control.Observed) (control.Prediction, error) {
	if o.Demand <= 0 || math.IsNaN(o.Demand) || math.IsInf(o.Demand, 0) {
		return control.Prediction{}, errors.New("no demand to check a plan at")
	}
	horizon, warm, minReq := c.Horizon, c.Warmup, c.MinRequests
	if horizon <= 0 {
		horizon = 4 * time.Second
	}
	if warm <= 0 {
		warm = time.Second
	}
	if minReq <= 0 {
		minReq = 400
	}
	horizon = min(max(horizon, time.Duration(float64(minReq)/o.Demand*float64(time.Second))), time.Minute)
	// Whole seconds: the simulator counts requests by the second they arrived in.
	total := (warm + horizon + time.Second - 1).Truncate(time.Second)
	w := workload.Constant(o.Demand, total)
	var gaps [][]time.Duration
	if o.Traffic != nil {
		gaps = o.Traffic.Gaps
	}
	w.Times = replayGaps(gaps, o.Demand, total, c.Seed)
	poisson := w.Times == nil
	servers := o.Servers
	if a := p.Allocation; a != nil {
		servers = max(servers, a.ActiveServers)
	}
	s, err := newSim(Config{Spec: spec, Workload: w, Servers: max(servers, 1), System: "static:" + string(c.Policy),
		Seed: c.Seed, Control: control.Config{TuneEvery: -1, ProfilesOnly: true}, CommLatency: c.CommLatency,
		Warmup: warm.Truncate(time.Second)})
	if err != nil {
		return control.Prediction{}, err
	}
	s.fix(p, o.Traffic)
	s.run()
	res := s.result()
	pred := control.Prediction{ViolationRatio: res.Summary.SLOViolationRatio, Requests: res.Summary.Requests,
		Queues: map[string]float64{}, Poisson: poisson}
	for i, h := range s.hops {
		if vp := p.Find(s.tasks[h.task], h.variant.Name); vp != nil && vp.Replicas > 0 && vp.MaxBatch > 0 {
			pred.Queues[h.name] = s.peaks[i] / float64(vp.Replicas*vp.MaxBatch)
		}
	}
	return pred, nil
}

// fix makes the simulation a check of plan p: no control loop (no ticks, no tuner: the events newSim queued are
// dropped), the workers given p's replicas already loaded, items emitting what traffic observed, and the queues'
// peaks recorded.
func (s *sim) fix(p *plan.Plan, traffic *demand.TrafficSample) {
	s.events = eventHeap{}
	s.loaded = true
	s.applyPlan(p, true)
	s.loaded = false
	s.peaks = make([]float64, len(s.hops))
	if traffic != nil {
		for _, h := range s.hops {
			if d, ok := traffic.SubRequests[h.name]; ok && len(h.children) > 0 {
				h.draw = &d
			}
		}
	}
	s.arr = s.cfg.Workload.Arrivals(s.cfg.Seed)
	if at, ok := s.arr.Next(); ok {
		s.push(event{at: int64(at), kind: evArrival})
	}
}

// subRequests draws how many sub-requests an item of h emits: from the observed distribution in a check, else as
// the variant's emulated executor does; the heartbeat's histogram counts it.
func (s *sim) subRequests(h *hop) int {
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
	h.subs.CountSubRequests(k)
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

// noteGap records the gap before an arrival now, as a frontend keeps its newest wire.MaxDemandGaps for its report.
func (s *sim) noteGap() {
	if s.lastArrival >= 0 {
		if len(s.gaps) == wire.MaxDemandGaps {
			s.gaps = append(s.gaps[:0], s.gaps[1:]...)
		}
		s.gaps = append(s.gaps, float32(time.Duration(s.now-s.lastArrival).Seconds()*1000))
	}
	s.lastArrival = s.now
}
