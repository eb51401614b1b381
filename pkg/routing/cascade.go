package routing

import (
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// cascadeEntries are the candidates each task's incoming traffic is routed over: hosted's, except that a task the
// plan serves by its cascade takes all of it on the cascade's first variant (its next variant takes only what the
// first sends on: reserveEscalations).
func cascadeEntries(spec *pipeline.Spec, p *plan.Plan, hosted map[string][]candidate) map[string][]candidate {
	if len(p.Cascades) == 0 {
		return hosted
	}
	entry := make(map[string][]candidate, len(hosted))
	for task, cs := range hosted {
		entry[task] = cs
		t := spec.Task(task)
		if _, on := p.Cascades[task]; !on || t == nil || t.Cascade == nil {
			continue
		}
		for _, c := range cs {
			if c.name == t.Cascade.Variants[0] {
				entry[task] = []candidate{c}
			}
		}
	}
	return entry
}

// reserveEscalations takes from the capacity left of each cascade's next variant what its first sends on: the
// level's share of the first's incoming traffic, so that backups do not count it as spare.
func reserveEscalations(spec *pipeline.Spec, p *plan.Plan, hosted map[string][]candidate, left,
	incoming map[string]float64) {
	for task, th := range p.Cascades {
		t := spec.Task(task)
		if t == nil || t.Cascade == nil || len(t.Cascade.Levels) == 0 {
			continue
		}
		var in float64
		for _, c := range hosted[task] {
			if c.name == t.Cascade.Variants[0] {
				in = incoming[c.key]
			}
		}
		for _, c := range hosted[task] {
			if c.name == t.Cascade.Variants[1] {
				sent := in * t.Cascade.Level(th).Escalation
				left[c.key] = max(0, left[c.key]-sent)
				incoming[c.key] += sent
			}
		}
	}
}
