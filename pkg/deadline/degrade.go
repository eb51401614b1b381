package deadline

import "github.com/sleipnir-serving/sleipnir/pkg/wire"

// Answers reports whether policy p answers an item it drops for reason with the result the item already has (for a
// sub-request, what its parent made for it; the root has none and is dropped): degrade does so for the items reroute
// drops for being late, no-time-for-last and no-faster-variant. An item whose deadline passed is dropped all the
// same: the frontend has replied.
//
// Degrade does not send a late item to the fastest variant with time left beyond the backups' spare capacity:
// measured, that floods the fastest variants' queues and answers fewer requests (docs/degrade.md).
func Answers(p Policy, reason string) bool {
	return p == Degrade && (reason == wire.DropLastTask || reason == wire.DropNoFaster)
}
