package demand

import (
	"math"
	"sort"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// FanoutEstimator smooths the multiplicative factors workers observe, per variant ("task/variant"), with an
// exponentially weighted moving average of the item and sub-request counts of each reporting interval. Not safe for
// concurrent use.
type FanoutEstimator struct {
	// Alpha is the weight of the newest interval, in (0, 1].
	Alpha float64
	// MinItems is how many (smoothed) items a variant must have executed before its observed factor replaces the
	// profile's.
	MinItems float64

	smoothed map[string]*smoothedCounts
	pending  map[string]*wire.FanoutCounts
}

type smoothedCounts struct {
	items    float64
	children map[string]float64
}

// smoothingDefaults are alpha and minItems with their defaults for 0 (or an alpha out of (0, 1]): 0.3 and 20.
func smoothingDefaults(alpha, minItems float64) (float64, float64) {
	if alpha <= 0 || alpha > 1 {
		alpha = 0.3
	}
	if minItems <= 0 {
		minItems = 20
	}
	return alpha, minItems
}

// NewFanoutEstimator returns an estimator; alpha 0 means 0.3, minItems 0 means 20.
func NewFanoutEstimator(alpha, minItems float64) *FanoutEstimator {
	alpha, minItems = smoothingDefaults(alpha, minItems)
	return &FanoutEstimator{Alpha: alpha, MinItems: minItems, smoothed: map[string]*smoothedCounts{},
		pending: map[string]*wire.FanoutCounts{}}
}

// Observe adds what a worker did since its previous heartbeat (a difference of its cumulative counters).
func (e *FanoutEstimator) Observe(key string, delta wire.FanoutCounts) {
	if delta.Items == 0 && len(delta.Children) == 0 { // counts nothing (a heartbeat of latencies alone)
		return
	}
	p := e.pending[key]
	if p == nil {
		p = &wire.FanoutCounts{Children: map[string]uint64{}}
		e.pending[key] = p
	}
	p.Items += delta.Items
	for c, n := range delta.Children {
		p.Children[c] += n
	}
}

// Seed starts key's average at factor f, as if MinItems items had shown it: a restarted planner starts from the
// factors of the plan in force rather than from the profile's, and the workers' heartbeats move it from there.
func (e *FanoutEstimator) Seed(key string, f pipeline.Fanout, children []string) {
	s := &smoothedCounts{items: e.MinItems, children: map[string]float64{}}
	for _, c := range children {
		s.children[c] = f.Mean * f.Share(c, children) * e.MinItems
	}
	e.smoothed[key] = s
}

// Tick folds the interval's counts into the averages; call it once per heartbeat interval. Variants that executed
// nothing in the interval keep their average (no traffic says nothing about the factor).
func (e *FanoutEstimator) Tick() {
	for key, p := range e.pending {
		if p.Items == 0 {
			continue
		}
		s := e.smoothed[key]
		if s == nil {
			s = &smoothedCounts{items: float64(p.Items), children: map[string]float64{}}
			for c, n := range p.Children {
				s.children[c] = float64(n)
			}
			e.smoothed[key] = s
			continue
		}
		a := e.Alpha
		s.items = a*float64(p.Items) + (1-a)*s.items
		for c := range s.children {
			s.children[c] *= 1 - a
		}
		for c, n := range p.Children {
			s.children[c] += a * float64(n)
		}
	}
	e.pending = map[string]*wire.FanoutCounts{}
}

// Estimate returns the observed factor of every variant seen often enough, as overrides of the profile's
// ("task/variant" -> factor): the mean sub-requests per item and each child task's share.
func (e *FanoutEstimator) Estimate(spec *pipeline.Spec) map[string]pipeline.Fanout {
	out := map[string]pipeline.Fanout{}
	keys := make([]string, 0, len(e.smoothed))
	for key := range e.smoothed {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		s := e.smoothed[key]
		k, _ := wire.ParseVariantKey(key) // a malformed key is the zero key: no task
		t := spec.Task(k.Task)
		if t == nil || len(t.Children) == 0 || s.items < e.MinItems {
			continue
		}
		total := 0.0
		for _, c := range t.Children {
			total += s.children[c]
		}
		f := pipeline.Fanout{Mean: total / s.items, Shares: map[string]float64{}}
		for _, c := range t.Children {
			if total > 0 {
				f.Shares[c] = s.children[c] / total
			} else {
				f.Shares[c] = 1 / float64(len(t.Children))
			}
		}
		out[key] = f
	}
	return out
}

// Samples returns, per variant ("task/variant"), how many items its factor estimate rests on, in effect: the smoothed
// items per interval times the span of the average, (2-Alpha)/Alpha intervals (see Estimator.Window).
func (e *FanoutEstimator) Samples() map[string]float64 {
	out := make(map[string]float64, len(e.smoothed))
	for key, s := range e.smoothed {
		out[key] = s.items * (2 - e.Alpha) / e.Alpha
	}
	return out
}

// FanoutSignificant reports whether a variant's multiplicative factor moved between two estimates (each "task/variant"
// -> factor, as Estimate returns): a child task's sub-requests per item differ by more than the relative threshold
// and by more than sigmas standard deviations of the difference (Poisson sub-requests per item over samples[key]
// items: each estimate's variance is its rate over the items; a variant without samples is tested on the threshold
// alone). A variant in one estimate and not the other is compared with its profile's factor, which is what a plan
// uses for a variant not yet measured: the first estimate of a variant a new plan hosts is a move only where it
// differs from that (a steady load otherwise re-planned at each variant's first estimate). Variants spec does not
// have are left out: no plan reads them.
func FanoutSignificant(spec *pipeline.Spec, previous, current map[string]pipeline.Fanout, threshold, sigmas float64,
	samples map[string]float64) bool {
	keys := make(map[string]struct{}, len(previous)+len(current))
	for key := range previous {
		keys[key] = struct{}{}
	}
	for key := range current {
		keys[key] = struct{}{}
	}
	for key := range keys {
		t, v := spec.Lookup(key)
		if v == nil {
			continue
		}
		_, measuredBefore := previous[key]
		_, measuredNow := current[key]
		for _, child := range t.Children {
			a, b := t.FanoutTo(v, child, current), t.FanoutTo(v, child, previous)
			d := math.Abs(a - b)
			if d <= threshold*b {
				continue
			}
			if n := samples[key]; n > 0 {
				variance := 0.0
				if measuredNow {
					variance += a / n
				}
				if measuredBefore {
					variance += b / n
				}
				if d <= sigmas*math.Sqrt(variance) {
					continue
				}
			}
			return true
		}
	}
	return false
}
