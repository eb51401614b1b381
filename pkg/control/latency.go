package control

import (
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// specFor is the spec the allocation and the routing plan with under o: the loop's, with o's blended profiles (what
// the workers measured) in place of its own.
func (l *Loop) specFor(o Observed) *pipeline.Spec { return latency.Apply(l.spec, o.Profiles) }

// latencyMoved says the blended profiles moved by more than ReplanThreshold since the allocation in force was
// solved: a variant running much slower (or faster) than planned changes what the cluster can serve.
func (l *Loop) latencyMoved(o Observed) bool {
	return latency.Moved(l.spec, l.planned.profiles, o.Profiles, l.cfg.ReplanThreshold)
}
