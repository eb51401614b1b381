// Dividing the workers between the pipelines.

package core

import (
	"time"
)

// division is the split of the able workers that each pipeline's control loop plans with (Observed.Servers), kept
// until its inputs move.
type division struct {
	shares []int
	able   int
}

// divide is the share of able workers each pipeline plans with: an even split, the first pipelines taking the
// remainder.
func (c *Cluster) divide(now time.Time, ds []Decision, able int) []int {
	if c.division.shares != nil && c.division.able == able {
		return c.division.shares
	}
	n := len(c.pipes)
	shares := make([]int, n)
	for i := range shares {
		shares[i] = able / n
		if i < able%n {
			shares[i]++
		}
	}
	c.division = division{shares: shares, able: able}
	return shares
}
