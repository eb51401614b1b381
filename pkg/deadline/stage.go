package deadline

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Stage is what the deadline policy knows of one hosted variant under one plan: the time an item may spend at the
// variant's task, how much time the tasks below need, and, per child task, the hosted variants and the backups a
// late item may be rerouted to. The live workers and the simulator build one per variant and plan, and decide
// with its methods.
type Stage struct {
	Policy   Policy
	Task     string
	LastTask bool
	// Budget is the variant's profiled time at its max batch; Allowance the time an item may spend at the task
	// (queueing plus processing): the budget stretched by the plan's budget scale Scale.
	Budget, Allowance time.Duration
	Scale             float64
	// LeastRest is as in Queued.
	LeastRest time.Duration
	children  map[string]childOptions
}

// childOptions are a child task's hosted variants and its backups (variants with spare capacity), and the time
// allotted below it (Progress.Rest).
type childOptions struct {
	hosted  map[string]Option
	backups []Option
	rest    time.Duration
}

// NewStage builds the stage of a variant of task whose budget (profiled time at its max batch) is budget, under
// plan p (nil before the first plan: no scale, no children hosted).
func NewStage(spec *pipeline.Spec, p *plan.Plan, policy Policy, task string, budget time.Duration) *Stage {
	s := &Stage{Policy: policy, Task: task, LastTask: spec.IsLeaf(task), Budget: budget, Allowance: budget, Scale: 1}
	if p == nil {
		return s
	}
	s.Scale = p.BudgetScale(spec)
	s.Allowance = time.Duration(float64(budget) * s.Scale)
	s.LeastRest = allottedBelow(spec, p, task, s.Scale, true)
	t := spec.Task(task)
	s.children = make(map[string]childOptions, len(t.Children))
	for _, child := range t.Children {
		co := childOptions{hosted: map[string]Option{}}
		for _, vp := range p.Variants {
			if vp.Task == child {
				co.hosted[vp.Variant] = option(spec, child, vp.Variant, vp.BudgetMs)
			}
		}
		for _, b := range p.Routing.Backup[child] {
			co.backups = append(co.backups, option(spec, child, b.Variant, b.LatencyMs))
		}
		co.rest = commLatency(spec) + allottedBelow(spec, p, child, s.Scale, false)
		s.children[child] = co
	}
	return s
}

// commLatency is the latency of one hop.
func commLatency(spec *pipeline.Spec) time.Duration {
	return time.Duration(spec.CommLatencyMs * float64(time.Millisecond))
}

// allottedBelow is the time allotted after task finishes until the reply, down the longest chain below it: each
// task at the allotment of its slowest hosted variant (the allotments the budget scale is made of), since the
// routing table may send an item to any of them; with backups, at its fastest backup instead when that is faster,
// since a late item can always be rerouted there (it has spare capacity). A hop before each task and one for the
// reply. A child task with nothing hosted is left out: its items are dropped as unrouted.
func allottedBelow(spec *pipeline.Spec, p *plan.Plan, task string, scale float64, backups bool) time.Duration {
	comm := commLatency(spec)
	longest := comm // the reply
	for _, child := range spec.Task(task).Children {
		pick, hosted := 0.0, false
		for _, v := range p.Variants {
			if v.Task == child {
				pick, hosted = max(pick, v.BudgetMs), true
			}
		}
		if !hosted {
			continue
		}
		if backups {
			for _, b := range p.Routing.Backup[child] {
				pick = min(pick, b.LatencyMs)
			}
		}
		t := comm + time.Duration(pick*scale*float64(time.Millisecond)) + allottedBelow(spec, p, child, scale, backups)
		longest = max(longest, t)
	}
	return longest
}

// BeforeExecute decides whether to drop an item taken from the variant's queue at now, due at due, that reached the
// queue at enqueued: "" keeps it, otherwise the drop reason (see the package function BeforeExecute).
func (s *Stage) BeforeExecute(now, due, enqueued time.Time) string {
	return BeforeExecute(s.Policy, Queued{Now: now, Deadline: due, LastTask: s.LastTask, Expected: s.Budget,
		Allowance: s.Allowance, Waited: now.Sub(enqueued), LeastRest: s.LeastRest})
}

// Route decides where one sub-request for child goes after an item spent atTask at this task, with left to its
// deadline: the routing table routes picks a variant with u1, and the deadline policy keeps it, reroutes it (u2
// breaks ties) or drops it. An item with no route is dropped as unrouted.
func (s *Stage) Route(child string, routes []plan.Route, atTask, left time.Duration, u1, u2 float64) Decision {
	v := plan.Pick(routes, u1)
	if v == "" {
		return Decision{Reason: wire.DropUnrouted}
	}
	co := s.children[child]
	return AfterTask(s.Policy, Progress{AtTask: atTask, Allowance: s.Allowance, Left: left, Scale: s.Scale,
		Rest: co.rest}, co.hosted[v], co.backups, u2)
}

func option(spec *pipeline.Spec, task, variant string, latencyMs float64) Option {
	o := Option{Variant: variant, Latency: time.Duration(latencyMs * float64(time.Millisecond))}
	if v := spec.Variant(task, variant); v != nil {
		o.Accuracy = v.Accuracy
	}
	return o
}
