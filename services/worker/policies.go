package worker

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/hop"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// policyWarmer computes routing_mode ramsis's policies of a plan (pkg/ramsis, for the child tasks of the variant
// served) in a goroutine of its own when the plan changes, so that no batch waits for value iteration; the table
// takes them once they are in the cache, and routes by the plan's tables until then.
type policyWarmer struct {
	mu        sync.Mutex
	wanted    *plan.Plan // the plan whose policies are being computed or are ready
	ready     bool
	installed *hop.Table // the table that has them
	// readyFor is the worker's record of the last plan whose policies are ready (Worker.policiesFor): a test
	// waits on it rather than on time.
	readyFor *atomic.Pointer[plan.Plan]
}

// follow starts computing plan p's policies for task's children when p is new.
func (w *policyWarmer) follow(spec *pipeline.Spec, p *plan.Plan, task *pipeline.Task, log *slog.Logger) {
	if spec.RoutingMode != routing.ModeRAMSIS || p == nil || len(task.Children) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wanted == p {
		return
	}
	w.wanted, w.ready = p, false
	go func() {
		for _, child := range task.Children {
			ch, err := ramsis.For(spec, p, child, time.Now)
			switch {
			case err != nil:
				log.Warn("ramsis policy", "pipeline", spec.Name, "task", child, "err", err)
			case ch != nil && ch.Fresh:
				log.Info("ramsis policy", "pipeline", spec.Name, "task", child, "epoch", p.Epoch,
					"states", ch.Policy.States, "iterations", ch.Policy.Iterations, "took", ch.Policy.Elapsed)
			}
		}
		w.mu.Lock()
		w.ready = w.wanted == p
		if w.ready && w.readyFor != nil {
			w.readyFor.Store(p)
		}
		w.mu.Unlock()
	}()
}

// use gives table t, made for plan p, the policies once they are ready (from the cache: no computing here).
func (w *policyWarmer) use(t *hop.Table, spec *pipeline.Spec, p *plan.Plan) {
	if spec.RoutingMode != routing.ModeRAMSIS {
		return
	}
	w.mu.Lock()
	ready := w.ready && w.wanted == p && w.installed != t
	if ready {
		w.installed = t
	}
	w.mu.Unlock()
	if ready {
		_, _ = t.UsePolicies(spec, p, time.Now) // computed above: the errors were logged there
	}
}
