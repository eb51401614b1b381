// Dividing the workers between the pipelines: the joint allocation.

package core

import (
	"errors"
	"maps"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// division is the split of the able workers each pipeline's control loop plans with (Observed.Servers and, per
// server class, Observed.Cluster), and what it was made from. It is made again when the able workers change, or when a pipeline's demand estimate moved by more
// than divisionThreshold since (significantly, with Control.RouteSigmas): a joint solve takes up to a second
// (divisionNodes), and each loop re-plans within its share on its own triggers meanwhile.
type division struct {
	shares  []plan.Cluster
	able    map[string]int // the able workers per class it was made for
	demands []float64
	joint   bool // made by the joint allocation
	err     error
	// solveMs is the time of the joint solves (solveJoint's) that made it at the last tick; -1 when that tick kept
	// the division in force.
	solveMs float64
}

// divide is the share of the able workers each pipeline plans with, per server class. A pipeline's control loop then
// plans alone within its share: given the shares, the joint allocation's plan of each pipeline is the pipeline's own
// best plan on them, so the loops' triggers, hysteresis and headroom stay each pipeline's.
func (c *Cluster) divide(ds []Decision, able plan.Cluster) []plan.Cluster {
	c.division.solveMs = -1
	if len(c.pipes) == 1 {
		return []plan.Cluster{able}
	}
	joint := c.sharing == control.SharingJoint
	for _, d := range ds {
		// Until every pipeline's demand is known, the loops hold their plans; an even split holds the servers.
		joint = joint && !d.Observed.DemandUnknown
	}
	counts := able.Counts()
	if !joint {
		if c.division.shares == nil || c.division.joint || !maps.Equal(c.division.able, counts) {
			c.division = division{shares: evenSplit(len(c.pipes), able), able: counts}
		}
		return c.division.shares
	}
	if !c.divisionDue(ds, counts) {
		return c.division.shares
	}
	c.division.solveMs = 0 // solveJoint adds each solve's time
	shares, err := c.jointShares(ds, able)
	if err != nil {
		// The shares in force stay (or an even split): the loops plan within them as before.
		if c.division.shares == nil || !maps.Equal(c.division.able, counts) {
			shares = evenSplit(len(c.pipes), able)
		} else {
			shares = c.division.shares
		}
	}
	c.division = division{shares: shares, able: counts, joint: true, err: err, solveMs: c.division.solveMs}
	for _, d := range ds {
		c.division.demands = append(c.division.demands, d.Observed.Demand)
	}
	return shares
}

// DivisionErr is why the last joint allocation failed (nil: it did not): the shares in force stayed.
func (c *Cluster) DivisionErr() error { return c.division.err }

// DivisionSolved is the time of the joint solves that divided the workers at the last tick; ok false when that tick
// kept the division in force (or there is none to make: one pipeline, or an even split).
func (c *Cluster) DivisionSolved() (ms float64, ok bool) {
	return c.division.solveMs, c.division.solveMs >= 0
}

// divisionDue says whether the joint division is to be made again.
func (c *Cluster) divisionDue(ds []Decision, able map[string]int) bool {
	last := c.division
	if !last.joint || !maps.Equal(last.able, able) {
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
// otherwise. Each pipeline gets the servers its plan uses, and a pipeline it shed the minimal hosting where the
// servers left have room for it (hostShed). The servers no plan uses are then shared out among the hosted
// pipelines, the highest class first, so a pipeline's loop has room for its headroom and its tuner lends what is
// idle. A pipeline hosted by neither gets no server: its loop publishes a plan that hosts nothing, and its frontends
// refuse its requests at once and report them as demand, which the next division weighs. (A share too small to
// host it would leave its loop unable to plan, its plan in force routing requests to workers that no longer serve
// it: they waited out their deadlines.)
func (c *Cluster) jointShares(ds []Decision, able plan.Cluster) ([]plan.Cluster, error) {
	plans, err := c.solveJoint(ds, able, true)
	if errors.Is(err, allocate.ErrNotHardware) {
		plans, err = c.solveJoint(ds, able, false)
	}
	if err != nil {
		return nil, err
	}
	shares := make([]map[string]int, len(c.pipes))
	left := able.Counts()
	take := func(i int, pl *plan.Plan) {
		shares[i] = map[string]int{}
		for class, n := range pl.ServersByClass() {
			shares[i][class] += n
			left[class] -= n
		}
	}
	for i, pl := range plans {
		if pl != nil {
			take(i, pl)
		}
	}
	for i, pl := range c.hostShed(ds, plans, able, left) {
		plans[i] = pl
		take(i, pl)
	}
	c.fairFloor(ds, plans, shares, able)
	hosted := 0
	for _, sh := range shares {
		if sh != nil {
			hosted++
		}
	}
	for _, sc := range able { // each class's servers no plan uses, the highest priority first
		for left[sc.Name] > 0 && hosted > 0 {
			for _, p := range c.byPriority {
				if left[sc.Name] == 0 {
					break
				}
				if shares[p.index] != nil {
					shares[p.index][sc.Name]++
					left[sc.Name]--
				}
			}
		}
	}
	out := make([]plan.Cluster, len(shares))
	for i, counts := range shares {
		for _, sc := range able {
			sc.Servers = counts[sc.Name]
			out[i] = append(out[i], sc)
		}
	}
	return out, nil
}

// fairFloor is the guarantee of a shared cluster: a pipeline the joint plans (plans, nil: shed) do not serve all its
// demand gets at least the servers its own plan for that demand takes on its even share of the cluster (all of the
// share when it needs more), moved to it from the pipelines of its class or lower (a higher class is served first:
// docs/several-pipelines.md) that the division gave more than their even share, the one with the most first; or
// nothing, when they cannot make up its floor (a share too small to host it would leave its loop unable to plan).
// The joint allocation maximizes the cluster's accuracy-weighted throughput, which in a heavy overload of one
// pipeline gives that one every server and sheds the others whatever their demand: the traffic example at 1,600 QPS
// took all 20 servers and ocr-chain at 20 QPS had none of its requests served. A pipeline its joint plan serves in
// full needs no floor (no solve is made for it).
func (c *Cluster) fairFloor(ds []Decision, plans []*plan.Plan, shares []map[string]int, able plan.Cluster) {
	even := evenSplit(len(ds), able)
	evenCounts := make([]map[string]int, len(even))
	for j := range even {
		evenCounts[j] = even[j].Counts()
	}
	for i, d := range ds {
		pl := plans[i]
		if d.Observed.Demand <= 0 || pl != nil && pl.Allocation != nil &&
			pl.Allocation.ServedQPS >= pl.Allocation.DemandQPS {
			continue
		}
		floor := evenCounts[i]
		if own, err := c.solveJoint(ds[i:i+1], even[i], false); err == nil && own[0] != nil {
			floor = own[0].ServersByClass()
		}
		moved := make([]map[string]int, len(shares)) // the shares after the moves, applied only if they make the floor
		for j := range shares {
			moved[j] = maps.Clone(shares[j])
		}
		if moved[i] == nil { // a shed pipeline's share stays nil (no crumbs) unless it makes its floor
			moved[i] = map[string]int{}
		}
		short, total := false, 0
		for class, want := range floor {
			total += want
			for moved[i][class] < want && !short {
				donor, most := -1, 0
				for j := range moved {
					if surplus := moved[j][class] - evenCounts[j][class]; j != i && surplus > most &&
						ds[j].Pipeline.Spec.Priority <= d.Pipeline.Spec.Priority {
						donor, most = j, surplus
					}
				}
				if donor < 0 {
					short = true
					break
				}
				moved[donor][class]--
				moved[i][class]++
			}
		}
		if !short && total > 0 {
			copy(shares, moved)
		}
	}
}

// hostShed is the minimal hosting rule: the pipelines the joint plans shed (nil) are planned again, alone, on the
// servers left (left, per class of able), each for its demand without headroom, at least Control.MinDemandQPS: a
// pipeline without demand keeps a replica or so of every task, where the cluster has room for them, so that its
// first requests are served. The joint allocation sheds a pipeline for lack of servers, but it sizes the
// pipelines with headroom in hardware mode first, and stops at divisionNodes: it may shed one that the servers no
// plan uses would host. The plans it finds, by pipeline index.
func (c *Cluster) hostShed(ds []Decision, plans []*plan.Plan, able plan.Cluster, left map[string]int) map[int]*plan.Plan {
	var shed []Decision
	var index []int
	for i, pl := range plans {
		if pl == nil {
			shed, index = append(shed, ds[i]), append(index, i)
		}
	}
	room := make(plan.Cluster, 0, len(able))
	for _, sc := range able {
		sc.Servers = left[sc.Name]
		room = append(room, sc)
	}
	if len(shed) == 0 || room.Total() == 0 {
		return nil
	}
	hosted, err := c.solveJoint(shed, room, false)
	if err != nil { // no room: they stay shed
		return nil
	}
	out := map[int]*plan.Plan{}
	for k, pl := range hosted {
		if pl != nil {
			out[index[k]] = pl
		}
	}
	return out
}

// solveJoint solves the joint allocation of ds on the able servers, with the headroom or without: each pipeline's
// plan (nil when shed). Its time counts to the division being made (DivisionSolved).
func (c *Cluster) solveJoint(ds []Decision, able plan.Cluster, padded bool) ([]*plan.Plan, error) {
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
	plans, res, err := joint.AllocateOn(pipes, able)
	if res != nil && c.division.solveMs >= 0 {
		c.division.solveMs += res.SolveMs
	}
	return plans, err
}

// evenSplit splits the able workers between n pipelines evenly, class by class, the first ones taking the
// remainder of each class.
func evenSplit(n int, able plan.Cluster) []plan.Cluster {
	shares := make([]plan.Cluster, n)
	for _, sc := range able {
		for i := range shares {
			k := sc
			k.Servers = sc.Servers / n
			if i < sc.Servers%n {
				k.Servers++
			}
			shares[i] = append(shares[i], k)
		}
	}
	return shares
}

// divisionThreshold is how far a pipeline's demand estimate must move for the division to be made again. At 10% (the
// routing's threshold), two pipelines' diurnal hour in the simulator missed 1.20% of the traffic example's deadlines,
// its plans a division behind a rising demand; at 5%, 0.13% (docs/several-pipelines.md).
const divisionThreshold = 0.05
