package sim

import (
	"fmt"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// Probe is one constant-demand run of a capacity search.
type Probe struct {
	QPS               float64 `json:"qps"`
	SLOViolationRatio float64 `json:"slo_violation_ratio"`
	MeanAccuracy      float64 `json:"mean_accuracy"`
}

// CapacitySearch tunes Capacity.
type CapacitySearch struct {
	// Warmup is run at the probed demand before Measure, which is what counts.
	Warmup, Measure time.Duration
	// Limit is the SLO-violation ratio a served demand stays under (default 0.01).
	Limit float64
	// Precision is the relative width the search narrows the answer to (default 0.02).
	Precision float64
	// Start is the first demand probed (default 25 QPS).
	Start float64
}

// Capacity is a system's effective capacity: the largest constant demand it serves with an SLO-violation ratio
// under Limit. It doubles the demand from Start until two runs in a row fail, then bisects between the largest
// demand served and the failure above it. cfg's Workload and Warmup are
// replaced by each probe's.
func Capacity(cfg Config, cs CapacitySearch) (float64, []Probe, error) {
	if cs.Limit == 0 {
		cs.Limit = 0.01
	}
	if cs.Precision == 0 {
		cs.Precision = 0.02
	}
	if cs.Start == 0 {
		cs.Start = 25
	}
	if cs.Measure <= 0 {
		return 0, nil, fmt.Errorf("capacity: measure for a positive duration, not %v", cs.Measure)
	}
	var probes []Probe
	serves := func(q float64) (bool, error) {
		c := cfg
		c.Workload = workload.Constant(q, cs.Warmup+cs.Measure)
		c.Warmup = cs.Warmup
		c.Progress = nil
		res, err := Run(c)
		if err != nil {
			return false, err
		}
		probes = append(probes, Probe{QPS: q, SLOViolationRatio: res.Summary.SLOViolationRatio,
			MeanAccuracy: res.Summary.MeanAccuracy})
		return res.Summary.SLOViolationRatio < cs.Limit, nil
	}
	// Doubling, past a single failure: at a few QPS the plan is one replica per task, and one burst can make a
	// short run miss the limit without the system being out of capacity.
	lo, hi := 0.0, 0.0
	fails := 0
	for q := cs.Start; fails < 2; q *= 2 {
		if q > 1e7 {
			return 0, probes, fmt.Errorf("capacity: still served at %g QPS", lo)
		}
		ok, err := serves(q)
		if err != nil {
			return 0, probes, err
		}
		switch {
		case ok:
			lo, fails = q, 0
		case fails == 0:
			hi, fails = q, 1
		default:
			fails++
		}
	}
	if lo == 0 {
		return 0, probes, nil
	}
	if hi < lo {
		hi = lo * 2
	}
	for (hi-lo)/lo > cs.Precision {
		mid := (lo + hi) / 2
		ok, err := serves(mid)
		if err != nil {
			return 0, probes, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, probes, nil
}
