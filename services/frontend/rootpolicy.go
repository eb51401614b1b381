package frontend

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// rootPolicies is what a frontend needs for routing_mode ramsis at the root of a pipeline of one task (RAMSIS's
// setting): the policy of the plan in force (computed in a goroutine of its own when the plan changes; the tables
// route until it is ready) and the requests in flight at each root variant, which for a task that is also the leaf
// is exactly its queue (waiting, in service or on the way), known without reading a consumer (a frontend may not:
// pkg/auth). A pipeline of more tasks keeps the tables at the root: its requests in flight are mostly below it.
// Under the frontend's mu.
type rootPolicies struct {
	byPipeline map[string]*rootPolicy
}

type rootPolicy struct {
	plan     *plan.Plan // the plan the policy is for (or being computed for)
	choice   *ramsis.Choice
	inFlight map[string]float64 // root variant -> requests sent there and not answered
}

func (r *rootPolicy) Depth(_, variant string) (float64, bool) { return r.inFlight[variant], true }

// rootByPolicy is the root variant the policy chooses for a request due at due, ok false when the tables decide
// (another routing mode, a pipeline of several tasks, no choice, or the policy not computed yet). Under f.mu.
func (f *Frontend) rootByPolicy(spec *pipeline.Spec, p *plan.Plan, due time.Time) (string, bool) {
	root := spec.Root()
	if spec.RoutingMode != routing.ModeRAMSIS || len(root.Children) > 0 {
		return "", false
	}
	if f.roots.byPipeline == nil {
		f.roots.byPipeline = map[string]*rootPolicy{}
	}
	rp := f.roots.byPipeline[spec.Name]
	if rp == nil {
		rp = &rootPolicy{inFlight: map[string]float64{}}
		f.roots.byPipeline[spec.Name] = rp
	}
	if rp.plan != p {
		rp.plan, rp.choice = p, nil
		go f.computeRootPolicy(spec, p, rp)
	}
	if rp.choice == nil {
		return "", false
	}
	// While admission control bounds the pipeline, the tables route: the requests in flight, the policy's view of
	// the queues, are then what the gate admits, not what waits (a request answered late at its deadline leaves the
	// count with its item still queued), and the policy sent everything to the accurate variant, whose rate the gate
	// then admitted: 64% violations against the tables' 13.5% (docs/ramsis.md).
	if !f.cfg.NoAdmission && f.gate != nil && f.gate.Congested(spec.Name, time.Now()) {
		return "", false
	}
	var scratch [4]time.Duration
	slack := time.Until(due) - deadline.RestBelow(spec, p, root.Name)
	return rp.choice.Choose(rp, root.Name, slack, scratch[:])
}

// computeRootPolicy computes (or finds in the cache) p's policy for spec's root, off the request path.
func (f *Frontend) computeRootPolicy(spec *pipeline.Spec, p *plan.Plan, rp *rootPolicy) {
	ch, err := ramsis.For(spec, p, spec.Root().Name, time.Now)
	if err != nil {
		f.log.Warn("ramsis policy", "pipeline", spec.Name, "task", spec.Root().Name, "err", err)
	} else if ch != nil && ch.Fresh {
		f.log.Info("ramsis policy", "pipeline", spec.Name, "task", spec.Root().Name, "epoch", p.Epoch,
			"states", ch.Policy.States, "iterations", ch.Policy.Iterations, "took", ch.Policy.Elapsed)
	}
	f.mu.Lock()
	if rp.plan == p {
		rp.choice = ch
	}
	f.mu.Unlock()
}

// sentToRoot counts n requests sent to (or, negative, answered from) pipeline's root variant. Under f.mu.
func (f *Frontend) sentToRoot(pipeline, variant string, n float64) {
	if rp := f.roots.byPipeline[pipeline]; rp != nil {
		rp.inFlight[variant] += n
	}
}
