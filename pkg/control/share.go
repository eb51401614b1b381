package control

import "github.com/sleipnir-serving/sleipnir/pkg/plan"

// keepsOnShare says a change of the servers the loop plans with (its share of a shared cluster, which the joint
// division deals anew each time a pipeline's estimate moves) is no reason to re-plan: the plan in force is in
// hardware mode (the most accurate variants on the fewest servers: more servers cannot make it better), it covers
// the estimate with its headroom, it fits the new share, and every class the share grew in is one it had servers of
// to spare. A solve on the new share finds that plan again, or one as good with other batch sizes, whose new epoch
// moves workers for nothing: four pipelines at a steady 20 QPS each on 80 simulated servers re-planned
// traffic-camera at each step of its share between 26 and 27 servers, its plans on 11 to 13 of them.
func (l *Loop) keepsOnShare(o Observed) bool {
	cur, last := l.current, l.planned
	if cur == nil || cur.Allocation == nil || cur.Mode != plan.ModeHardware || !last.padded || last.overloaded ||
		o.Demand > last.covers {
		return false
	}
	share := o.OnCluster()
	if !fitsOn(cur, share) {
		return false
	}
	used := cur.ServersByClass()
	for class, n := range share.Counts() {
		if had := last.servers[class]; n > had && used[class] >= had {
			return false // the plan took every server of a class the share now has more of
		}
	}
	return true
}

// onShare is the plan in force on the servers of o that it keeps on (keepsOnShare): the same epoch and allocation,
// its record of the cluster it runs on (ClusterServers, Cluster, the cost) that of o, routed for o as a re-plan that
// finds the same allocation routes it. Published, it moves no worker.
func (l *Loop) onShare(o Observed) *plan.Plan {
	r := *l.current
	a := *r.Allocation
	r.Allocation = &a
	a.ClusterServers, a.Cluster = o.Servers, nil
	priceOn(&r, o.OnCluster())
	r.Fanout, r.Profiles = o.Fanout, o.Profiles
	r.Routing = l.route(&r, o)
	return &r
}
