package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// The KV bucket is shared: anything that can write to it can write anything. Every reader checks what it reads
// with these functions, so that a value that would stop traffic (`{}` under plan.<p>, an assignment to a variant
// that does not exist) is refused and the last good one kept, rather than followed.

// maxReplicas bounds one variant's replicas: far above any cluster, far below what would make Assign loop for long.
const maxReplicas = 1 << 16

// probTolerance is how far a routing table's probabilities may sum from 1 (they are computed in floating point).
const probTolerance = 1e-6

// Validate checks that p is a plan of spec that frontends and workers can follow: it names spec's pipeline and a
// known mode, hosts only the spec's variants at its batch sizes, routes the root task when it hosts anything, and
// routes only to hosted variants of the right task with probabilities that sum to 1. A plan that hosts nothing is
// valid: the pipeline has no server (the joint division shed it), and its frontends refuse its requests at once.
func (p *Plan) Validate(spec *pipeline.Spec) error {
	if p == nil {
		return errors.New("no plan")
	}
	if spec == nil {
		return errors.New("no spec to check the plan against")
	}
	if p.Pipeline != spec.Name {
		return fmt.Errorf("plan of pipeline %q, want %q", p.Pipeline, spec.Name)
	}
	if p.Epoch == 0 {
		return errors.New("epoch 0")
	}
	switch p.Mode {
	case ModeStatic, ModeHardware, ModeAccuracy, ModeOverloaded:
	default:
		return fmt.Errorf("unknown mode %q", p.Mode)
	}
	if err := p.checkVariants(spec); err != nil {
		return err
	}
	if err := p.checkRouting(spec); err != nil {
		return err
	}
	if err := p.checkFactors(spec); err != nil {
		return err
	}
	if err := p.checkCascades(spec); err != nil {
		return err
	}
	if err := p.checkGears(spec); err != nil {
		return err
	}
	return p.checkAllocation()
}

// checkVariants checks the hosted variants: the spec's, once each, with a sane number of replicas, at one of its batch
// sizes.
func (p *Plan) checkVariants(spec *pipeline.Spec) error {
	seen := map[wire.VariantKey]bool{}
	for _, v := range p.Variants {
		key := wire.VariantKey{Task: v.Task, Variant: v.Variant}
		if spec.Variant(v.Task, v.Variant) == nil {
			return fmt.Errorf("hosts %s, which the pipeline does not have", key)
		}
		if seen[key] {
			return fmt.Errorf("hosts %s twice", key)
		}
		if v.Class != "" && v.Class != wire.ClassOf(v.Variant) {
			return fmt.Errorf("%s: class %q, where its name says %q", key, v.Class, wire.ClassOf(v.Variant))
		}
		seen[key] = true
		if v.Replicas < 1 || v.Replicas > maxReplicas {
			return fmt.Errorf("%s: %d replicas", key, v.Replicas)
		}
		if !slices.Contains(spec.BatchSizes, v.MaxBatch) {
			return fmt.Errorf("%s: max batch %d is not one of the pipeline's batch sizes %v", key, v.MaxBatch,
				spec.BatchSizes)
		}
		if !finiteNonNegative(v.BudgetMs) || !finiteNonNegative(v.CapacityQPS) {
			return fmt.Errorf("%s: budget %v ms, capacity %v QPS", key, v.BudgetMs, v.CapacityQPS)
		}
	}
	return nil
}

// checkRouting checks the routing tables: one for the root (none when the plan hosts nothing), downstream ones from
// the spec's variants to their children, and backups that are hosted.
func (p *Plan) checkRouting(spec *pipeline.Spec) error {
	root := spec.Root().Name
	if len(p.Routing.Root) == 0 && !p.HostsNothing() {
		return fmt.Errorf("no root routing (task %s), while the plan hosts %d variants", root, len(p.Variants))
	}
	if err := p.checkRoutes(spec, root, p.Routing.Root); err != nil {
		return fmt.Errorf("root routing: %w", err)
	}
	for key, tables := range p.Routing.Downstream {
		t, _ := spec.Lookup(key)
		if t == nil {
			return fmt.Errorf("routing from %q, which the pipeline does not have", key)
		}
		for child, routes := range tables {
			if !slices.Contains(t.Children, child) {
				return fmt.Errorf("routing from %s to %q, which is not a child task of %s", key, child, t.Name)
			}
			if err := p.checkRoutes(spec, child, routes); err != nil {
				return fmt.Errorf("routing from %s to %s: %w", key, child, err)
			}
		}
	}
	for task, backups := range p.Routing.Backup {
		for _, b := range backups {
			if !p.Hosts(task, b.Variant) {
				return fmt.Errorf("backup %s is not hosted", wire.VariantKey{Task: task, Variant: b.Variant})
			}
			if !finiteNonNegative(b.LeftoverQPS) || !finiteNonNegative(b.LatencyMs) || !finiteNonNegative(b.Accuracy) {
				return fmt.Errorf("backup %s: leftover %v QPS, latency %v ms, accuracy %v",
					wire.VariantKey{Task: task, Variant: b.Variant}, b.LeftoverQPS, b.LatencyMs, b.Accuracy)
			}
		}
	}
	return nil
}

// checkFactors checks the measured factors a plan carries: the multiplicative factors and latency profiles of the
// spec's variants.
func (p *Plan) checkFactors(spec *pipeline.Spec) error {
	for key, f := range p.Fanout {
		t, _ := spec.Lookup(key)
		if t == nil {
			return fmt.Errorf("multiplicative factor of %q, which the pipeline does not have", key)
		}
		if !finiteNonNegative(f.Mean) {
			return fmt.Errorf("multiplicative factor of %s: mean %v", key, f.Mean)
		}
		for child, share := range f.Shares {
			if !slices.Contains(t.Children, child) || !finiteNonNegative(share) || share > 1 {
				return fmt.Errorf("multiplicative factor of %s: share %v to %q", key, share, child)
			}
		}
	}
	for key, points := range p.Profiles {
		_, v := spec.Lookup(key)
		if v == nil {
			return fmt.Errorf("latency profile of %q, which the pipeline does not have", key)
		}
		if len(points) != len(v.Profile) {
			return fmt.Errorf("latency profile of %s: %d points, the spec's %d", key, len(points), len(v.Profile))
		}
		for i, pt := range points {
			if pt.Batch != v.Profile[i].Batch || !finiteNonNegative(pt.P50Ms) || pt.P50Ms == 0 ||
				!finiteNonNegative(pt.P95Ms) || !finiteNonNegative(pt.P99Ms) {
				return fmt.Errorf("latency profile of %s: point %+v", key, pt)
			}
		}
	}
	return nil
}

// checkAllocation checks the allocation's figures, when the plan has one.
func (p *Plan) checkAllocation() error {
	if a := p.Allocation; a != nil {
		for _, v := range []float64{a.DemandQPS, a.ServedQPS, a.EstimateQPS, a.SystemAccuracy, a.Gap, a.SolveMs} {
			if !finiteNonNegative(v) {
				return fmt.Errorf("allocation %+v: a figure is negative or not finite", *a)
			}
		}
		if a.ClusterServers < 0 || a.ActiveServers < 0 {
			return fmt.Errorf("allocation of %d active servers of %d", a.ActiveServers, a.ClusterServers)
		}
	}
	return nil
}

// checkRoutes checks one routing table of task: hosted variants of the task, probabilities in [0, 1] summing to 1.
// An empty table is allowed below the root: the plan hosts no variant of the task, and its items are dropped.
func (p *Plan) checkRoutes(spec *pipeline.Spec, task string, routes []Route) error {
	if len(routes) == 0 {
		return nil
	}
	sum := 0.0
	for _, r := range routes {
		if spec.Variant(task, r.Variant) == nil || !p.Hosts(task, r.Variant) {
			return fmt.Errorf("routes to %s, which the plan does not host",
				wire.VariantKey{Task: task, Variant: r.Variant})
		}
		if !finiteNonNegative(r.Prob) || r.Prob > 1+probTolerance {
			return fmt.Errorf("probability %v for %s", r.Prob, r.Variant)
		}
		sum += r.Prob
	}
	if math.Abs(sum-1) > probTolerance {
		return fmt.Errorf("probabilities sum to %v, not 1", sum)
	}
	return nil
}

func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// Validate checks that a is an assignment of worker that it can serve under spec and p, the plan in force for
// a.Pipeline: an idle assignment always is; otherwise p hosts a.Task/a.Variant at a.MaxBatch, and a is of p's
// epoch. An assignment of an older epoch is stale (the planner rewrites every assignment under a new epoch); one of
// a newer epoch is ahead of the plan the worker has seen, and becomes valid once that plan arrives.
func (a Assignment) Validate(worker string, spec *pipeline.Spec, p *Plan) error {
	if a.Worker != worker {
		return fmt.Errorf("assignment of worker %q, want %q", a.Worker, worker)
	}
	if a.Idle() {
		return nil
	}
	if spec == nil || p == nil {
		return fmt.Errorf("%w: pipeline %q", ErrNoPlan, a.Pipeline)
	}
	if spec.Variant(a.Task, a.Variant) == nil {
		return fmt.Errorf("pipeline %s has no variant %s", a.Pipeline, a.Key())
	}
	if a.MaxBatch < 1 || !slices.Contains(spec.BatchSizes, a.MaxBatch) {
		return fmt.Errorf("%s: max batch %d is not one of the pipeline's batch sizes %v", a.Key(), a.MaxBatch,
			spec.BatchSizes)
	}
	if !finiteNonNegative(a.BudgetMs) {
		return fmt.Errorf("%s: budget %v ms", a.Key(), a.BudgetMs)
	}
	if a.Epoch != p.Epoch {
		return fmt.Errorf("%w: assignment of epoch %d, plan of epoch %d", ErrEpoch, a.Epoch, p.Epoch)
	}
	vp := p.Find(a.Task, a.Variant)
	if vp == nil || vp.Replicas < 1 || vp.MaxBatch != a.MaxBatch {
		return fmt.Errorf("the plan of epoch %d does not host %s at max batch %d", p.Epoch, a.Key(), a.MaxBatch)
	}
	return nil
}

// ErrNoPlan says the spec or the plan of an assignment's pipeline has not been read: at a worker's start its
// assignment may arrive first.
var ErrNoPlan = errors.New("no spec or plan yet")

// ErrEpoch says an assignment and the plan are of different epochs: one of them has not arrived yet, or the
// assignment is stale.
var ErrEpoch = errors.New("epochs differ")

// registrationSkew is how far a registration's own times may be from when the bucket stored it.
const registrationSkew = time.Minute

// ValidateRegistration checks a worker's heartbeat read from key worker.<id>, stored at stored: the value names
// the same worker, its times are set, in order and within a minute of stored, and its heartbeat counts from 1.
func ValidateRegistration(id string, r wire.Registration, stored time.Time) error {
	if r.ID != id {
		return fmt.Errorf("registration of %q under the key of %q", r.ID, id)
	}
	if !wire.ValidName(id) {
		return fmt.Errorf("worker id %q", id)
	}
	if r.Class != "" && !wire.ValidName(r.Class) {
		return fmt.Errorf("class %.80q", r.Class)
	}
	if r.Started.IsZero() || r.Updated.IsZero() || r.Updated.Before(r.Started) {
		return fmt.Errorf("started %v, updated %v", r.Started, r.Updated)
	}
	if d := r.Updated.Sub(stored); d > registrationSkew || d < -registrationSkew {
		return fmt.Errorf("updated %v, stored %v", r.Updated, stored)
	}
	if r.Heartbeat < 1 {
		return fmt.Errorf("heartbeat %d", r.Heartbeat)
	}
	if f := r.Failing; f != nil {
		if _, err := wire.ParseServedKey(f.Variant); err != nil {
			return fmt.Errorf("failing variant %q: want pipeline:task/variant", f.Variant)
		}
		if len(f.Reason) > wire.MaxFailureReason || f.Attempts < 1 || f.Since.IsZero() || f.Since.After(r.Updated) {
			return fmt.Errorf("failing %s: reason of %d bytes, %d attempts since %v", f.Variant, len(f.Reason),
				f.Attempts, f.Since)
		}
	}
	return nil
}
