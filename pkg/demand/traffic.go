package demand

import (
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TrafficSample is the traffic a plan check replays (control.Observed.Traffic): the recent inter-arrival times at
// the root and, per variant, the distribution of the sub-requests its items emitted.
type TrafficSample struct {
	// Gaps are, per frontend heard from recently (in the order of their ids), its latest times between requests,
	// oldest first. Several frontends' arrivals are the superposition of their streams.
	Gaps [][]time.Duration
	// SubRequests is per variant ("task/variant") what its items emitted; variants without one emit as profiled.
	SubRequests map[string]SubRequestDist
}

// SubRequestDist is how many sub-requests (over every child task) a variant's items emitted: Weights[k] the share
// of items that emitted k, the last entry those that emitted at least that many, TailMean on average.
type SubRequestDist struct {
	Weights  []float64
	TailMean float64
}

// Traffic folds the frontends' gap samples (wire.DemandReport.GapsMs) and the workers' sub-request histograms
// (the differences of wire.FanoutCounts.SubRequests between heartbeats, demand.Counters) into a TrafficSample. Pure
// (time passed in); not safe for concurrent use.
type Traffic struct {
	// MaxGaps is how many of each frontend's newest gaps are kept (default 4096: half a minute of 128 a second); MaxAge how long a frontend's
	// gaps count without a newer report (default 5 s); MaxItems how many items a histogram weighs before its
	// older counts are halved (default 4096), so that it follows a fan-out that changes.
	MaxGaps  int
	MaxAge   time.Duration
	MaxItems float64
	gaps     map[string]*frontendGaps
	subs     map[string]*subHist
}

type frontendGaps struct {
	// gaps are oldest first, the newest MaxGaps of them kept (up to twice that before a trim). Never changed in
	// place: a trim copies to a new array, so a sample shares the array instead of copying it every tick.
	gaps []time.Duration
	seen time.Time
}

type subHist struct {
	weights []float64
	tailSub float64 // sub-requests emitted by the items of the last entry
}

// NewTraffic returns a Traffic that has seen nothing.
func NewTraffic() *Traffic {
	return &Traffic{MaxGaps: 4096, MaxAge: 5 * time.Second, MaxItems: 4096, gaps: map[string]*frontendGaps{},
		subs: map[string]*subHist{}}
}

// Observe keeps the gaps of a frontend's demand report received at now. A report whose gaps are malformed
// (wire.DemandReport.Gaps) is refused whole, with its error.
func (t *Traffic) Observe(r wire.DemandReport, now time.Time) error {
	gs, err := r.Gaps()
	if err != nil || len(gs) == 0 {
		return err
	}
	f := t.gaps[r.Frontend]
	if f == nil {
		f = &frontendGaps{}
		t.gaps[r.Frontend] = f
	}
	if len(f.gaps)+len(gs) > cap(f.gaps) && len(f.gaps) > t.MaxGaps {
		// Trimmed before the appends outgrow the array, not after: growing it first doubled it at every trim (a
		// sixth of the bytes the simulator allocated).
		f.gaps = append(make([]time.Duration, 0, max(2*t.MaxGaps, t.MaxGaps+len(gs))), f.gaps[len(f.gaps)-t.MaxGaps:]...)
	}
	for _, g := range gs {
		f.gaps = append(f.gaps, time.Duration(float64(g)*float64(time.Millisecond)))
	}
	if n := len(f.gaps) - t.MaxGaps; n > t.MaxGaps {
		f.gaps = append(make([]time.Duration, 0, 2*t.MaxGaps), f.gaps[n:]...)
	}
	f.seen = now
	return nil
}

// Fold adds what a variant ("task/variant") counted between two heartbeats (a difference from demand.Counters).
// A malformed histogram is ignored.
func (t *Traffic) Fold(key string, d wire.FanoutCounts) {
	c, err := d.SubRequestBuckets()
	if err != nil || len(c) == 0 {
		return
	}
	h := t.subs[key]
	if h == nil {
		h = &subHist{}
		t.subs[key] = h
	}
	if len(h.weights) < len(c) {
		h.weights = append(h.weights, make([]float64, len(c)-len(h.weights))...)
	}
	var subs, items uint64
	for _, n := range d.Children {
		subs += n
	}
	for k, n := range c {
		h.weights[k] += float64(n)
		items += n
		if k < len(c)-1 {
			subs -= min(subs, uint64(k)*n)
		}
	}
	if last := len(c) - 1; last == wire.MaxSubRequestBuckets-1 {
		h.tailSub += float64(max(subs, uint64(last)*c[last]))
	}
	total := 0.0
	for _, w := range h.weights {
		total += w
	}
	if total > t.MaxItems { // older counts weigh half
		for k := range h.weights {
			h.weights[k] /= 2
		}
		h.tailSub /= 2
	}
}

// Sample is the traffic observed as of now; nil when nothing was.
func (t *Traffic) Sample(now time.Time) *TrafficSample {
	s := &TrafficSample{SubRequests: map[string]SubRequestDist{}}
	ids := make([]string, 0, len(t.gaps))
	for id, f := range t.gaps {
		if now.Sub(f.seen) <= t.MaxAge {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := t.gaps[id].gaps
		s.Gaps = append(s.Gaps, g[max(0, len(g)-t.MaxGaps):len(g):len(g)]) // capped: an append cannot reach it
	}
	for key, h := range t.subs {
		total := 0.0
		for _, w := range h.weights {
			total += w
		}
		if total <= 0 {
			continue
		}
		d := SubRequestDist{Weights: make([]float64, len(h.weights))}
		for k, w := range h.weights {
			d.Weights[k] = w / total
		}
		if last := len(h.weights) - 1; h.weights[last] > 0 {
			d.TailMean = max(float64(last), h.tailSub/h.weights[last])
		}
		s.SubRequests[key] = d
	}
	if len(s.Gaps) == 0 && len(s.SubRequests) == 0 {
		return nil
	}
	return s
}

// Gaps records the times between consecutive arrivals as a frontend reports them (wire.DemandReport.GapsMs): the
// newest wire.MaxDemandGaps since the last Take. The zero value is ready; not safe for concurrent use.
type Gaps struct {
	last time.Time
	ring []float32
	next int // where the next gap goes once ring is full
}

// Note records an arrival at now.
func (g *Gaps) Note(now time.Time) {
	if !g.last.IsZero() {
		ms := float32(max(now.Sub(g.last), 0).Seconds() * 1000)
		if len(g.ring) < wire.MaxDemandGaps {
			g.ring = append(g.ring, ms)
		} else {
			g.ring[g.next] = ms
			g.next = (g.next + 1) % len(g.ring)
		}
	}
	g.last = now
}

// Take returns the gaps recorded since the last Take, oldest first, and starts anew (the next gap is still measured
// from the last arrival).
func (g *Gaps) Take() []float32 {
	out := append(slices.Clone(g.ring[g.next:]), g.ring[:g.next]...)
	g.ring, g.next = g.ring[:0], 0
	return out
}

// minDispersionGaps is how many gaps a frontend must have reported for its arrivals' dispersion to count: fewer
// say little of a squared coefficient of variation (a few long gaps make it).
const minDispersionGaps = 256

// Dispersion is the index of dispersion of the requests' arrivals (the variance over the mean of their counts in a
// long window): per frontend the squared coefficient of variation of its gaps, which it is for a renewal process,
// and for several frontends the mean weighted by their rates (independent streams' counts add, variances too).
// At least 1, Poisson arrivals', which it is when no frontend has reported minDispersionGaps gaps. The allocation sizes its queueing
// headroom with it (allocate.Input.ArrivalDispersion).
func (s *TrafficSample) Dispersion() float64 {
	if s == nil {
		return 1
	}
	var weighted, rate float64
	for _, g := range s.Gaps {
		cv2, mean, ok := squaredCV(g)
		if !ok {
			continue
		}
		r := 1 / mean // requests per ms
		weighted += r * cv2
		rate += r
	}
	if rate == 0 {
		return 1
	}
	// Smoother arrivals than Poisson's plan as Poisson's: an estimate just under 1 is mostly noise (about 0.1 on
	// 4096 gaps), and a plan that counted on it would keep too little headroom.
	return max(1, weighted/rate)
}

// squaredCV is the squared coefficient of variation of gaps and their mean in milliseconds; not ok for fewer than
// minDispersionGaps or a mean of 0.
func squaredCV(gaps []time.Duration) (cv2, mean float64, ok bool) {
	if len(gaps) < minDispersionGaps {
		return 0, 0, false
	}
	var sum, sq float64
	for _, d := range gaps {
		ms := float64(d) / float64(time.Millisecond)
		sum += ms
		sq += ms * ms
	}
	n := float64(len(gaps))
	mean = sum / n
	if mean <= 0 {
		return 0, 0, false
	}
	return (sq/n - mean*mean) / (mean * mean), mean, true
}

// DispersionOf is one frontend's arrivals' dispersion as TrafficSample.Dispersion reads it, at least 1, from the
// gaps kept of it; NaN while fewer than minDispersionGaps are.
func (t *Traffic) DispersionOf(frontend string) float64 {
	f := t.gaps[frontend]
	if f == nil {
		return math.NaN()
	}
	cv2, _, ok := squaredCV(f.gaps[max(0, len(f.gaps)-t.MaxGaps):])
	if !ok {
		return math.NaN()
	}
	return max(1, cv2)
}
