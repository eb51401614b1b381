package hop

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// UsePolicies gives t, under plan p with routing_mode ramsis, each child task's policy (pkg/ramsis: from its cache,
// or computed now, now being the caller's clock): the caller calls it when it applies a plan, off the per-item
// path. It does nothing in the other modes; a child with one hosted variant has no choice (the tables route it).
// solving is the time spent computing the policies not found in the cache.
func (t *Table) UsePolicies(spec *pipeline.Spec, p *plan.Plan, now func() time.Time) (solving time.Duration,
	err error) {
	if spec.RoutingMode != routing.ModeRAMSIS || p == nil {
		return 0, nil
	}
	t.policy = make([]*ramsis.Choice, len(t.Children))
	for c, child := range t.Children {
		ch, err := ramsis.For(spec, p, child, now)
		if err != nil {
			return solving, err
		}
		if ch != nil && ch.Fresh {
			solving += ch.Policy.Elapsed
		}
		t.policy[c] = ch
	}
	return solving, nil
}

// byPolicy is the variant of task the policy sends an item with slack to, given the queues q: "", false when there
// is no choice or a queue is not known (the tables decide then).
func (st *Stepper) byPolicy(ch *ramsis.Choice, q routing.Depths, task string, slack time.Duration) (string, bool) {
	if ch == nil {
		return "", false
	}
	return ch.Choose(q, task, slack, st.backlog[:len(ch.Options)])
}
