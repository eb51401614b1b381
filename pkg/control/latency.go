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

// latencyMoved says the blended profiles moved since the allocation in force was solved, at least latencyReplanGap
// ago: a variant running slower than planned by more than ReplanThreshold changes what the cluster can serve. A
// variant running faster is not urgent, as a fall of the demand is not: it must be faster by more than
// latencyFasterThreshold (on a steady 10 QPS the OCR workers' p50s wandered by 20% either way, and each move up
// and down re-planned: 5 new plans in 3 minutes).
func (l *Loop) latencyMoved(now time.Time, o Observed) bool {
	return now.Sub(l.planned.at) >= latencyReplanGap &&
		latency.MovedBy(l.spec, l.planned.profiles, o.Profiles, l.cfg.ReplanThreshold, latencyFasterThreshold)
}

// latencyFasterThreshold is how much faster than planned (relative p50) a variant must run before a re-plan follows.
const latencyFasterThreshold = 0.4
