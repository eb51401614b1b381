// Package batching holds the rule by which a replica forms its next batch from its variant's queue. Pure: the live
// worker and the simulator batch alike.
//
// A free replica waits for the first message of its variant's queue; it then takes, without waiting, one more message
// per batch slot still free (MaxBatch less the items it will execute so far), if the queue holds that many. A batch
// executes at most MaxBatch items: a message carries one or more items (a parent's items for one variant, or a share of
// them: pkg/hop), so a taken message whose items do not fit (Fits) does not join the batch, nor do the messages taken
// after it. They go back to the head of the queue, in order, for the next free replica (the live worker naks them,
// and JetStream delivers them again before newer ones), except those delivered more than HandBacks times: the
// replica carries those to its own next batch, which begins with them. A hand-back counts a delivery toward the
// consumers' bound on deliveries (pkg/bus.SetAsideAt), and under load the same message, handed back by replica
// after replica, would reach the bound and be set aside as poison; carrying costs it the wait for this
// replica's batch while another may be free, so it is the exception. Only a batch's first message to execute may
// exceed MaxBatch alone; its items run in model batches of at most MaxBatch, one after the other (Chunks). A batch
// thus takes about the latency of its max batch size, the latency the plan budgets for the task, and the deadline
// policy's decision before executing holds for every item in it. A replica does not wait for a batch to fill, so a
// lightly loaded variant runs small batches at their short latency.
package batching

// More is how many more messages a replica takes, at once, after the first: one per free batch slot, at most the
// pending messages. taken is the number of items it will execute so far (those of the first message that were not
// dropped).
func More(maxBatch, taken, pending int) int {
	return max(0, min(maxBatch-taken, pending))
}

// HandBacks is how many deliveries of a message may end in its going back to the queue because it did not fit a
// batch: two, leaving the bound on deliveries (pkg/bus.SetAsideAt) to the faults it is there for.
const HandBacks = 2

// HandBack says whether a message that did not fit a batch, or was taken after one that did not, delivered the
// given number of times (1: the first delivery), goes back to the queue; if not, the replica carries it to its next
// batch. Carrying only those keeps the rest free for any replica (carrying every message that did not fit, once one
// had to be, missed 0.1 point more deadlines on the camera example at 80% of its capacity, seeds 1-5).
func HandBack(delivered uint64) bool { return delivered <= HandBacks }

// Fits says a message of items items to execute joins a batch that executes taken items so far: it does when the
// batch stays within maxBatch items, and always when it is the batch's first.
func Fits(maxBatch, taken, items int) bool {
	return taken == 0 || taken+items <= maxBatch
}

// Chunks is the number of model batches, of at most maxBatch items each, that items take.
func Chunks(items, maxBatch int) int {
	if items <= 0 || maxBatch <= 0 {
		return 0
	}
	return (items + maxBatch - 1) / maxBatch
}
