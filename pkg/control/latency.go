package control

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// specFor is the spec the allocation and the routing plan with under o: the loop's, with o's blended profiles (what
// the workers measured) in place of its own.
func (l *Loop) specFor(o Observed) *pipeline.Spec { return latency.Apply(l.spec, o.Profiles) }

// latencyReplanGap is the least time between two allocations solved for moves of the measured latencies: after a
// slowdown the measurements of one variant after another cross the threshold over a few seconds (and each plan
// that moves to other variants gets those measured next), and each new plan may cost swaps.
const latencyReplanGap = 3 * time.Second

// latencyMoved says the blended profiles moved by more than ReplanThreshold since the allocation in force was
// solved, at least latencyReplanGap ago: a variant running much slower (or faster) than planned changes what the
// cluster can serve.
func (l *Loop) latencyMoved(now time.Time, o Observed) bool {
	return now.Sub(l.planned.at) >= latencyReplanGap &&
		latency.Moved(l.spec, l.planned.profiles, o.Profiles, l.cfg.ReplanThreshold)
}
