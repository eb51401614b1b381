package routing

import (
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// ModeQueue is the spec's routing_mode that chooses each item's variant from the queues' measured state
// (ChooseByQueue) with the plan's routing tables as the fallback; "" (or ModeTables) follows the tables alone.
const (
	ModeTables = "tables"
	ModeQueue  = "queue"
	// ModeRAMSIS chooses each item's variant by a policy computed by value iteration from the arrivals at the
	// planned load (pkg/ramsis), from the same queues as ModeQueue.
	ModeRAMSIS = "ramsis"
)

// ReadsQueues says whether routing mode mode chooses from the queues' state (the callers read them then).
func ReadsQueues(mode string) bool { return mode == ModeQueue || mode == ModeRAMSIS }

// Depths is the state of the queues a queue-aware choice reads: the items waiting at task/variant or in service
// there; ok false when it is not known (the tables decide then).
type Depths interface {
	Depth(task, variant string) (items float64, ok bool)
}

// Queues is the measured state of the queues, read now and then: Reading names the reading the depths come from,
// and changes when they are read again (live, every 50 ms). What a chooser sent since, the reading cannot hold:
// pkg/hop counts it on top, or every item of a batch (live, every item until the next reading) would see the same
// short queue and join it (herding).
type Queues interface {
	Depths
	Reading() uint64
}

// QueueOption is a hosted variant of a task as the queue-aware choice sees it: its accuracy, its replicas and max
// batch under the plan, and its profile.
type QueueOption struct {
	Variant            string
	Accuracy           float64
	Replicas, MaxBatch int
	profile            *pipeline.Variant
}

// QueueOptions are task's variants plan p hosts, most accurate first (ties: the faster at its max batch first).
func QueueOptions(spec *pipeline.Spec, p *plan.Plan, task string) []QueueOption {
	var out []QueueOption
	for _, vp := range p.Variants {
		if v := spec.Variant(task, vp.Variant); vp.Task == task && v != nil && vp.Replicas > 0 {
			out = append(out, QueueOption{Variant: vp.Variant, Accuracy: v.Accuracy, Replicas: vp.Replicas,
				MaxBatch: max(1, vp.MaxBatch), profile: v})
		}
	}
	slices.SortStableFunc(out, func(a, b QueueOption) int {
		if a.Accuracy != b.Accuracy {
			return -cmpFloat(a.Accuracy, b.Accuracy)
		}
		return cmpFloat(a.Batch(a.MaxBatch).Seconds(), b.Batch(b.MaxBatch).Seconds())
	})
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Batch is the p95 latency of a batch of n.
func (o QueueOption) Batch(n int) time.Duration {
	return time.Duration(o.profile.LatencyFor(n).P95Ms * float64(time.Millisecond))
}

// Completion is the expected time from joining o's queue, depth items ahead, to leaving it served: the replicas
// take the items ahead in rounds of full batches, then the item's own batch, of what is left of the last round
// spread over the replicas (p95 latencies: a queue-aware choice that misses its deadline costs more than one
// that passes a variant over).
func (o QueueOption) Completion(depth float64) time.Duration {
	perRound := float64(o.Replicas * o.MaxBatch)
	rounds := math.Floor(max(0, depth) / perRound)
	rest := max(0, depth) - rounds*perRound + 1 // the item is in the last round's batches
	own := min(o.MaxBatch, int(math.Ceil(rest/float64(o.Replicas))))
	return time.Duration(rounds)*o.Batch(o.MaxBatch) + o.Batch(own)
}

// queueHeadroom is how many times its expected completion an item's time left must be for a queue-aware choice:
// the plan's own rule (the profiled latencies of a path fill at most half the SLO, the rest is for the queueing
// the profiles do not show). Measured on bursty demand, 1 (the whole time left) kept the accurate variants' queues
// at the edge of the deadline, and twice the tables' violations (docs/queue-routing.md).
const queueHeadroom = 2

// ChooseByQueue is the most accurate of task's options (QueueOptions' order) whose expected completion, given its
// measured queue, fits queueHeadroom times within left (the time the item has for this task: its time to the
// deadline less the hop and what the tasks below are allotted). "", false when none fits or a queue is not known:
// the caller follows the routing table.
func ChooseByQueue(task string, opts []QueueOption, q Depths, left time.Duration) (string, bool) {
	for _, o := range opts {
		depth, ok := q.Depth(task, o.Variant)
		if !ok {
			return "", false
		}
		if o.Completion(depth) <= left/queueHeadroom {
			return o.Variant, true
		}
	}
	return "", false
}
