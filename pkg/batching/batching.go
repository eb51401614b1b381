// Package batching holds the rule by which a replica forms its next batch from its variant's queue. Pure: the live
// worker and the simulator batch alike.
//
// A free replica waits for the first message of its variant's queue; it then takes, without waiting, one more
// message per batch slot still free (MaxBatch less the items it will execute so far), if the queue holds that many,
// and executes the items in model batches of at most MaxBatch, one after the other. It never holds messages it
// cannot start at once, so an idle replica of the same variant gets them instead; and it does not wait for a batch
// to fill, so a lightly loaded variant runs small batches at their short latency.
package batching

// More is how many more messages a replica takes, at once, after the first: one per free batch slot, at most
// the pending messages. taken is the number of items it will execute so far (those of the first message that were
// not dropped).
func More(maxBatch, taken, pending int) int {
	return max(0, min(maxBatch-taken, pending))
}

// Chunks is the number of model batches, of at most maxBatch items each, that items take.
func Chunks(items, maxBatch int) int {
	if items <= 0 || maxBatch <= 0 {
		return 0
	}
	return (items + maxBatch - 1) / maxBatch
}
