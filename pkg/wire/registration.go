package wire

import (
	"fmt"
	"time"
)

// Registration is the value of wire.WorkerKey(id): the worker's liveness and counters.
type Registration struct {
	ID string `json:"id"`
	// Class is the worker's server class (DefaultClass when empty): the planner places on it only variants hosted
	// on its class (VariantOn).
	Class     string      `json:"class,omitempty"`
	Started   time.Time   `json:"started"`
	Updated   time.Time   `json:"updated"`
	Variant   string      `json:"variant,omitempty"` // "pipeline:task/variant" it serves now
	Stats     WorkerStats `json:"stats"`
	SwapMs    float64     `json:"swap_ms,omitempty"` // time of the last variant switch
	Heartbeat int64       `json:"heartbeat"`
	// Observed is, per variant served since the worker started ("pipeline:task/variant"), what it measured
	// (cumulative): the planner folds the differences between heartbeats into its estimates of the multiplicative
	// factors.
	Observed map[string]Observed `json:"observed,omitempty"`
	// Failing, when set, says the worker cannot serve its assignment: loading the variant's executor or binding its
	// consumer failed. The worker keeps trying (with backoff); the planner does not count it as capacity meanwhile.
	Failing *AssignmentFailure `json:"failing,omitempty"`
}

// AssignmentFailure is why a worker cannot serve its assignment.
type AssignmentFailure struct {
	Variant  string    `json:"variant"`  // "pipeline:task/variant" of the assignment (ServedKey)
	Reason   string    `json:"reason"`   // the last attempt's error, at most MaxFailureReason bytes
	Since    time.Time `json:"since"`    // the first failed attempt at this variant
	Attempts int       `json:"attempts"` // failed attempts so far
}

// MaxFailureReason bounds AssignmentFailure.Reason (a worker cuts a longer error).
const MaxFailureReason = 512

// Observed are a worker's cumulative measurements of one variant.
type Observed struct {
	// Items executed and the sub-requests they emitted per child task: the observed multiplicative factor.
	FanoutCounts
	Batches uint64 `json:"batches"`
	// Messages counts the task messages the items came in (a message holds the items of one parent item for one
	// variant): the planner's tuner turns the messages waiting in a queue into items with Items/Messages.
	Messages uint64 `json:"messages,omitempty"`
	// QueueWaitMs is the total time the executed items waited in the variant's queue (mean: divide by Items).
	QueueWaitMs float64 `json:"queue_wait_ms"`
	// Dropped counts items dropped at this variant, by reason.
	Dropped map[string]uint64 `json:"dropped,omitempty"`
	// Rerouted counts sub-requests this variant sent to a backup variant instead of the routing table's choice.
	Rerouted uint64 `json:"rerouted,omitempty"`
	// Degraded counts the items answered degraded at this variant, by reason (deadline policy degrade: answered
	// with what their path had made, instead of dropped).
	Degraded map[string]uint64 `json:"degraded,omitempty"`
	// Latency summarises the model batches this variant ran over a recent window (not cumulative), one entry per
	// profiled batch size, in increasing batch order: the planner blends them with the profile (pkg/latency).
	Latency []BatchLatency `json:"latency,omitempty"`
}

// BatchLatency summarises the model batches of one profiled batch size a worker ran recently. A batch of n items
// counts at the smallest profiled batch size of at least n (the profile point the planner budgets it at).
type BatchLatency struct {
	Batch int     `json:"batch"`
	Count int     `json:"count"` // batches the quantiles rest on
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
}

// WorkerStats counts what a worker did since it started.
type WorkerStats struct {
	Messages  uint64 `json:"messages"`
	Items     uint64 `json:"items"`
	Batches   uint64 `json:"batches"`
	Dropped   uint64 `json:"dropped"`
	Failed    uint64 `json:"failed"`
	Discarded uint64 `json:"discarded"` // messages on its subject that were not valid task messages
	// Rerouted counts sub-requests sent to a backup variant instead of the routing table's choice.
	Rerouted uint64 `json:"rerouted"`
	// Degraded counts items answered degraded (deadline policy degrade).
	Degraded uint64 `json:"degraded,omitempty"`
	// Returned counts messages taken for a batch whose items did not fit it: handed back to the queue, or carried to
	// the replica's next batch (pkg/batching.HandBack).
	Returned uint64 `json:"returned"`
	// Unconfirmed counts result messages their frontend did not confirm in time: the task message was redelivered.
	// Abandoned counts those given up, unconfirmed past the request's deadline and a grace (the frontend is gone).
	Unconfirmed uint64 `json:"unconfirmed_results"`
	Abandoned   uint64 `json:"abandoned_results"`
	// DropReasons counts dropped items by reason (wire.Drop*).
	DropReasons map[string]uint64 `json:"drop_reasons"`
	// SetAside counts task messages set aside in DeadLetterStream, by reason (wire.SetAside*).
	SetAside map[string]uint64 `json:"set_aside,omitempty"`
}

// FanoutCounts are what the replicas of one variant did: items executed and the sub-requests they emitted per child
// task (cumulative in heartbeats; the planner folds in the differences).
type FanoutCounts struct {
	Items    uint64            `json:"items"`
	Children map[string]uint64 `json:"children,omitempty"`
	// SubRequests[k] counts the items that emitted k sub-requests in all (over every child task), the last entry
	// those that emitted len-1 or more: the distribution the plan check draws from. At most MaxSubRequestBuckets
	// entries (SubRequestBuckets reads them).
	SubRequests []uint64 `json:"sub_requests,omitempty"`
	// Escalated counts the items a cascade's first variant sent on to the next (their confidence was below the
	// plan's threshold): the measured escalation rate is Escalated/Items.
	Escalated uint64 `json:"escalated,omitempty"`
}

// MaxSubRequestBuckets bounds FanoutCounts.SubRequests.
const MaxSubRequestBuckets = 64

// SubRequestBucket is the entry of FanoutCounts.SubRequests an item that emitted k sub-requests counts in.
func SubRequestBucket(k int) int { return min(max(k, 0), MaxSubRequestBuckets-1) }

// CountSubRequests counts an item that emitted k sub-requests in c.SubRequests, growing it as needed.
func (c *FanoutCounts) CountSubRequests(k int) {
	b := SubRequestBucket(k)
	if len(c.SubRequests) <= b {
		c.SubRequests = append(c.SubRequests, make([]uint64, b+1-len(c.SubRequests))...)
	}
	c.SubRequests[b]++
}

// SubRequestBuckets checks SubRequests (a heartbeat is input): more than MaxSubRequestBuckets entries is an error.
func (c *FanoutCounts) SubRequestBuckets() ([]uint64, error) {
	if len(c.SubRequests) > MaxSubRequestBuckets {
		return nil, fmt.Errorf("sub-request histogram of %d entries, want at most %d", len(c.SubRequests),
			MaxSubRequestBuckets)
	}
	return c.SubRequests, nil
}
