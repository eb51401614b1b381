// Admission control (pkg/admission): the frontend's part is to read a request's class and deadline from its headers,
// hand the gate what it needs of the plan in force, and tell it when an admitted request is answered.

package frontend

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/admission"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// gatePlan caches admission.Of of one plan on the cluster's servers: the fastest path is worth computing once per
// plan, not per request.
type gatePlan struct {
	plan  *plan.Plan
	spare int // the catalog's spare servers it was computed with: it reaches the plan's replicas and these
	of    admission.Plan
}

// admitRequest decides, from its headers alone (before its payload is read), whether a request is sent into its
// pipeline. gated says the gate counts it in flight: gateDone must follow its answer. A request for a pipeline
// without a spec or plan is not gated (it is refused further on); one with a bad priority or deadline header is
// refused here (the priority header also with Config.NoAdmission), and so is one the plan in force gives no server
// (admission.RefuseUnhosted, also with Config.NoAdmission), as demand still.
func (f *Frontend) admitRequest(pipelineName string, header func(string) string, arrival time.Time) (gated bool, err error) {
	spec, p := f.lookup(pipelineName)
	if spec == nil || p == nil {
		return false, nil
	}
	class, err := requestClass(spec, header)
	if err != nil {
		return false, err
	}
	spare := f.catalog.SpareServers()
	f.admMu.Lock()
	gp := f.gatePlans[pipelineName]
	if gp.plan != p || gp.spare != spare {
		gp = gatePlan{plan: p, spare: spare, of: admission.Of(spec, p, p.Reach(spare))}
		f.gatePlans[pipelineName] = gp
	}
	f.admMu.Unlock()
	var d admission.Decision
	if f.cfg.NoAdmission {
		var refused bool
		if d, refused = admission.RefuseUnhosted(pipelineName, gp.of); !refused {
			return false, nil
		}
	} else {
		deadline, err := deadlineOf(arrival, header, spec, f.maxAhead(spec))
		if err != nil {
			return false, err
		}
		d = f.gate.Decide(admission.Request{Pipeline: pipelineName, Class: class, Now: arrival, Deadline: deadline}, gp.of)
		if d.Admit {
			return true, nil
		}
	}
	// Demand the plan did not serve is demand still: the planner's estimate must see it, or it would fall to what
	// the plan serves, the plan would look sufficient, and admission would stop (a pipeline the plan gives no server
	// would never get one).
	f.admMu.Lock()
	f.refusedDemand[pipelineName]++
	f.admMu.Unlock()
	f.noteGap(pipelineName) // as the simulator's frontend does: the arrivals the plan check replays are the demand's
	f.cfg.Metrics.AdmissionRefused(pipelineName, class, d.Reason)
	return false, refuse(ErrOverloaded, "%s", d.Detail)
}

// gateDone tells the gate an admitted request (arrived at arrival) was answered with status ("" for a refusal after
// admission): the gate learns the pipeline's rate and its violations from the answers.
func (f *Frontend) gateDone(pipelineName string, gated bool, arrival time.Time, status string) {
	if gated {
		f.gate.Done(pipelineName, arrival, time.Now(), admission.OutcomeOf(status))
	}
}

// requestClass is a request's priority class: its wire.HeaderPriority, no higher than its pipeline's, or the
// pipeline's.
func requestClass(spec *pipeline.Spec, header func(string) string) (int, error) {
	s := header(wire.HeaderPriority)
	if s == "" {
		return spec.Priority, nil
	}
	class, err := wire.ParsePriority(s, pipeline.MaxPriority)
	if err != nil {
		return 0, refuse(ErrBadRequest, "%v", err)
	}
	if class > spec.Priority {
		return 0, refuse(ErrBadRequest, "%s %d is above pipeline %s's class %d: a request may ask for its "+
			"pipeline's class or a lower one", wire.HeaderPriority, class, spec.Name, spec.Priority)
	}
	return class, nil
}
