package control

// InferLine's coarse-grained baselines (InferLine, SoCC'20, section 6, "Coarse-Grained Baseline Comparison"): the
// whole pipeline, profiled as one black box, is replicated as a single unit. The unit is one replica of each task's
// most accurate variant on one server class, all at the one largest batch size with which a batch of requests
// crosses the pipeline within the SLO; the units are as many as the planning trace's mean rate needs (CG-Mean) or its
// peak rate over a sliding window as long as the SLO (CG-Peak). They plan once, before serving, on the planning
// trace, and never again (the paper's figure 5 compares planners alone), on the class that makes them cheapest.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// PlanningTrace is a sample of a pipeline's arrivals that a system planning once plans on (InferLine's "sample
// arrival trace"): the arrival times, from its start, in order, over Length.
type PlanningTrace struct {
	Arrivals []time.Duration
	Length   time.Duration
}

// MeanQPS is the trace's mean request rate.
func (t PlanningTrace) MeanQPS() float64 {
	if t.Length <= 0 {
		return 0
	}
	return float64(len(t.Arrivals)) / t.Length.Seconds()
}

// PeakQPS is the trace's peak request rate over a sliding window of the given length: the most arrivals any window
// of it holds, per second. A trace shorter than the window has its mean.
func (t PlanningTrace) PeakQPS(window time.Duration) float64 {
	if window <= 0 || t.Length <= window {
		return t.MeanQPS()
	}
	most, lo := 0, 0
	for hi, at := range t.Arrivals {
		for at-t.Arrivals[lo] >= window {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return float64(most) / window.Seconds()
}

// PlanningTraces gives each pipeline's planning trace by name (Config.Traces); ok false when it has none.
type PlanningTraces interface {
	Trace(pipeline string) (t PlanningTrace, ok bool)
}

// TraceSet is PlanningTraces from a map of pipeline names.
type TraceSet map[string]PlanningTrace

// Trace is the trace of pipeline name.
func (s TraceSet) Trace(name string) (PlanningTrace, bool) {
	t, ok := s[name]
	return t, ok
}

// CoarseGrained is a coarse-grained baseline: CG-Peak when Peak, else CG-Mean.
type CoarseGrained struct {
	Peak bool
	// Trace is the planning trace; without one, the first plan is sized for the demand observed then (its mean and
	// its peak alike).
	Trace *PlanningTrace
	// planned is the one plan, per pipeline name (the loop passes a spec with the measured latencies applied)
	planned map[string]*plan.Plan
}

// NewCoarseGrained is a coarse-grained baseline on a planning trace (nil: none).
func NewCoarseGrained(peak bool, trace *PlanningTrace) *CoarseGrained {
	return &CoarseGrained{Peak: peak, Trace: trace, planned: map[string]*plan.Plan{}}
}

// Rate is the request rate the baseline provisions for: the trace's mean or its peak over a window of the SLO, or
// observed without a trace.
func (a *CoarseGrained) Rate(spec *pipeline.Spec, observed float64) float64 {
	if a.Trace == nil {
		return observed
	}
	if a.Peak {
		return a.Trace.PeakQPS(time.Duration(spec.SLOMs * float64(time.Millisecond)))
	}
	return a.Trace.MeanQPS()
}

// Allocate returns the one plan: made at the first call, the same at every later one (the loop then keeps it).
func (a *CoarseGrained) Allocate(spec *pipeline.Spec, o Observed) (*plan.Plan, error) {
	if p, ok := a.planned[spec.Name]; ok {
		return p, nil
	}
	p, err := CoarseGrainedPlan(spec, o.OnCluster(), a.Rate(spec, o.Demand))
	if err != nil {
		return nil, err
	}
	a.planned[spec.Name] = p
	return p, nil
}

// Unit is the coarse-grained unit of a pipeline on one class: one replica of each task's variant at one batch size.
type Unit struct {
	Class string
	// Variants are each task's variant, in spec order.
	Variants []*pipeline.Variant
	Batch    int
	// LatencyMs is a batch of Batch requests' latency across the pipeline (its slowest chain, p95 latencies);
	// CapacityQPS the requests per second the unit serves (its slowest task's).
	LatencyMs   float64
	CapacityQPS float64
}

// variant is task's variant in u.
func (u Unit) variant(spec *pipeline.Spec, task string) *pipeline.Variant {
	for i := range spec.Tasks {
		if spec.Tasks[i].Name == task {
			return u.Variants[i]
		}
	}
	return nil
}

// UnitOn is the pipeline's unit on class: each task's most accurate variant on it, and the largest of the spec's
// batch sizes with which a batch of requests crosses every chain within the SLO, profiled in isolation as a black
// box: each task runs the items a batch of requests brings it (the profiled multiplicative factors of the variants
// above) in batches of at most that size, one after the other, at their p95 latency, plus a hop's communication
// latency per task. ok false when some task has no variant on class, or not even batch 1 fits.
func UnitOn(spec *pipeline.Spec, class string) (u Unit, ok bool) {
	u.Class = class
	scale := map[string]float64{} // items per request reaching each task
	for i := range spec.Tasks {
		t := &spec.Tasks[i]
		var best *pipeline.Variant
		for j := range t.Variants {
			v := &t.Variants[j]
			if v.Class() == class && (best == nil || v.Accuracy > best.Accuracy) {
				best = v
			}
		}
		if best == nil {
			return Unit{}, false
		}
		u.Variants = append(u.Variants, best)
	}
	var walk func(task string, s float64)
	walk = func(task string, s float64) {
		scale[task] += s
		t := spec.Task(task)
		for _, c := range t.Children {
			walk(c, s*t.FanoutTo(u.variant(spec, task), c, nil))
		}
	}
	walk(spec.Root().Name, 1)
	chains := spec.Chains()
	for _, b := range slices.Backward(spec.BatchSizes) {
		worst := 0.0
		for _, chain := range chains {
			ms := 0.0
			for _, task := range chain {
				items := int(math.Ceil(float64(b) * scale[task]))
				full, rest := items/b, items%b
				v := u.variant(spec, task)
				ms += float64(full)*v.LatencyFor(b).P95Ms + spec.CommLatencyMs
				if rest > 0 {
					ms += v.LatencyFor(rest).P95Ms
				}
			}
			worst = max(worst, ms)
		}
		if worst <= spec.SLOMs {
			u.Batch, u.LatencyMs = b, worst
			break
		}
	}
	if u.Batch == 0 {
		return Unit{}, false
	}
	u.CapacityQPS = math.Inf(1)
	for i, t := range spec.Tasks {
		if s := scale[t.Name]; s > 0 {
			u.CapacityQPS = min(u.CapacityQPS, u.Variants[i].Throughput(u.Batch)/s)
		}
	}
	return u, true
}

// CoarseGrainedPlan replicates the pipeline's unit as often as a demand of qps needs on the class where that costs
// least per hour (the fewest servers when no class is priced; ties: the class first in name order), among the
// classes with the servers for it; when none has them, on the class that serves the most, with all the units it
// holds.
func CoarseGrainedPlan(spec *pipeline.Spec, cluster plan.Cluster, qps float64) (*plan.Plan, error) {
	type option struct {
		unit  Unit
		units int
		cost  float64
		fits  bool
	}
	var opts []option
	for _, sc := range cluster {
		u, ok := UnitOn(spec, sc.Name)
		if !ok || sc.Servers < len(spec.Tasks) {
			continue
		}
		n := max(1, int(math.Ceil(qps/u.CapacityQPS-1e-9)))
		fit := sc.Servers / len(spec.Tasks)
		o := option{unit: u, units: n, fits: n <= fit}
		if !o.fits {
			o.units = fit
		}
		o.cost = float64(o.units*len(spec.Tasks)) * sc.PricePerHour
		if !cluster.Priced() {
			o.cost = float64(o.units * len(spec.Tasks))
		}
		opts = append(opts, o)
	}
	if len(opts) == 0 {
		return nil, fmt.Errorf("%w: no class of %s hosts a replica of every task within the SLO", ErrCannotServe,
			cluster)
	}
	sort.SliceStable(opts, func(i, j int) bool {
		a, b := opts[i], opts[j]
		if a.fits != b.fits {
			return a.fits
		}
		if !a.fits {
			return float64(a.units)*a.unit.CapacityQPS > float64(b.units)*b.unit.CapacityQPS
		}
		return a.cost < b.cost
	})
	best := opts[0]
	p := &plan.Plan{Pipeline: spec.Name, Mode: plan.ModeHardware}
	if !best.fits {
		p.Mode = plan.ModeAccuracy // past the cluster: the most it can serve
	}
	used := map[string]int{}
	for i, t := range spec.Tasks {
		p.Variants = append(p.Variants, plan.NewVariantPlan(t.Name, best.unit.Variants[i], best.units, best.unit.Batch))
		used[best.unit.Class] += best.units
	}
	p.Allocation = &plan.Allocation{DemandQPS: min(qps, float64(best.units)*best.unit.CapacityQPS),
		ClusterServers: cluster.Total(), ActiveServers: p.Servers(), Cluster: cluster, CostPerHour: cluster.Cost(used),
		Optimal: true, SystemAccuracy: unitAccuracy(spec, best.unit)}
	return p, nil
}

// unitAccuracy is the end-to-end accuracy of the unit's variants: the mean of its leaves' path accuracies.
func unitAccuracy(spec *pipeline.Spec, u Unit) float64 {
	chains := spec.Chains()
	sum := 0.0
	for _, chain := range chains {
		path := make([]string, len(chain))
		for i, task := range chain {
			path[i] = wire.VariantKey{Task: task, Variant: u.variant(spec, task).Name}.String()
		}
		sum += spec.PathAccuracyOf(path)
	}
	return sum / float64(len(chains))
}
