// Dividing the workers between the pipelines: the joint allocation.

package core

import (
	"errors"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
)

// division is the split of the able workers each pipeline's control loop plans with (Observed.Servers), and what it
// was made from. It is made again when the able workers change, or when a pipeline's demand estimate moved by more
// than divisionThreshold since (significantly, with Control.RouteSigmas): a joint solve takes up to a second
// (divisionNodes), and each loop re-plans within its share on its own triggers meanwhile.
type division struct {
	shares  []int
	able    int
	demands []float64
	joint   bool // made by the joint allocation
	err     error
}

// divide is the share of the able workers each pipeline plans with. A pipeline's control loop then plans alone
// within its share: given the shares, the joint allocation's plan of each pipeline is the pipeline's own best plan
// on them, so the loops' triggers, hysteresis and headroom stay each pipeline's.
func (c *Cluster) divide(ds []Decision, able int) []int {
	if len(c.pipes) == 1 {
		return []int{able}
	}
	joint := c.sharing == control.SharingJoint
	for _, d := range ds {
		// Until every pipeline's demand is known, the loops hold their plans; an even split holds the servers.
		joint = joint && !d.Observed.DemandUnknown
	}
	if !joint {
		if c.division.shares == nil || c.division.joint || c.division.able != able {
			c.division = division{shares: evenSplit(len(c.pipes), able), able: able}
		}
		return c.division.shares
	}
	if !c.divisionDue(ds, able) {
		return c.division.shares
	}
	shares, err := c.jointShares(ds, able)
	if err != nil {
		// The shares in force stay (or an even split): the loops plan within them as before.
		if c.division.shares == nil || c.division.able != able {
			shares = evenSplit(len(c.pipes), able)
		} else {
			shares = c.division.shares
		}
	}
	c.division = division{shares: shares, able: able, joint: true, err: err}
	for _, d := range ds {
		c.division.demands = append(c.division.demands, d.Observed.Demand)
	}
	return shares
}

// DivisionErr is why the last joint allocation failed (nil: it did not): the shares in force stayed.
func (c *Cluster) DivisionErr() error { return c.division.err }

// divisionDue says whether the joint division is to be made again.
func (c *Cluster) divisionDue(ds []Decision, able int) bool {
	last := c.division
	if !last.joint || last.able != able {
		return true
	}
	for i, d := range ds {
		o := d.Observed
		if demand.Significant(last.demands[i], o.Demand, divisionThreshold, c.cfg.Control.RouteSigmas,
			o.DemandWindow) {
			return true
		}
	}
	return false
}

// jointShares solves the joint allocation (control.JointMILP) for what the pipelines observed, as each loop would
// size its plan: the demand with the headroom when every pipeline's plan stays in hardware mode, the demand itself
// otherwise. Each pipeline gets the servers its plan uses; those no plan uses are shared out, the highest class
// first, so a pipeline's loop has room for its headroom and its tuner lends what is idle.
func (c *Cluster) jointShares(ds []Decision, able int) ([]int, error) {
	res, err := c.solveJoint(ds, able, true)
	if errors.Is(err, allocate.ErrNotHardware) {
		res, err = c.solveJoint(ds, able, false)
	}
	if err != nil {
		return nil, err
	}
	shares := make([]int, len(c.pipes))
	left := able
	for i, r := range res.Pipelines {
		shares[i] = r.ServersUsed
		left -= r.ServersUsed
	}
	for left > 0 {
		for _, p := range c.byPriority {
			if left == 0 {
				break
			}
			shares[p.index]++
			left--
		}
	}
	return shares, nil
}

// solveJoint solves the joint allocation of ds on able servers, with the headroom or without.
func (c *Cluster) solveJoint(ds []Decision, able int, padded bool) (*allocate.JointResult, error) {
	pipes := make([]control.JointPipeline, len(ds))
	for i, d := range ds {
		o := d.Observed
		o.Demand = c.cfg.Control.Planned(o.Demand, padded)
		if c.cfg.Control.ProfilesOnly {
			o.Profiles = nil
		}
		pipes[i] = control.JointPipeline{Spec: d.Pipeline.Spec, Observed: o}
	}
	joint := c.joint
	joint.HardwareOnly = padded // with the headroom, a plan that stays in hardware mode
	_, res, err := joint.Allocate(pipes, able)
	return res, err
}

// evenSplit splits able workers between n pipelines evenly, the first ones taking the remainder.
func evenSplit(n, able int) []int {
	shares := make([]int, n)
	for i := range shares {
		shares[i] = able / n
		if i < able%n {
			shares[i]++
		}
	}
	return shares
}

// divisionThreshold is how far a pipeline's demand estimate must move for the division to be made again. At 10% (the
// routing's threshold), two pipelines' diurnal hour in the simulator missed 1.20% of the traffic example's deadlines,
// its plans a division behind a rising demand; at 5%, 0.13% (docs/several-pipelines.md).
const divisionThreshold = 0.05
