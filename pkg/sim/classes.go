package sim

// Server classes: each server has a class of the cluster (Config.Cluster), hosts only its class's variants (the
// planning core's assignment), and costs its class's price while it is in use.

import (
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// planningTrace is the planning trace of a workload (control.PlanningTrace): its arrivals drawn again from a seed
// of their own, as InferLine plans on a sample trace with the characteristics of the workload served, not on it.
func planningTrace(w *workload.Workload, seed uint64) control.PlanningTrace {
	arr := w.Arrivals(seed ^ 0x91a7ace)
	t := control.PlanningTrace{Length: w.Duration()}
	for {
		at, ok := arr.Next()
		if !ok {
			return t
		}
		t.Arrivals = append(t.Arrivals, at)
	}
}

// classed says the cluster is worth reporting per class: it has classes other than the default, or prices.
func (s *sim) classed() bool {
	return len(s.cluster) > 1 || len(s.cluster) == 1 && s.cluster[0].Name != wire.DefaultClass || s.cluster.Priced()
}

// inUse is, per pipeline, the servers assigned one of its variants (the second's sample): how many, per class when
// classed, and their hourly price.
func (s *sim) inUse() map[string]*use {
	out := make(map[string]*use, len(s.pipes))
	for _, p := range s.pipes {
		out[p.spec.Name] = &use{}
	}
	for i := range s.servers {
		a := s.servers[i].assigned
		if a.Variant == "" {
			continue
		}
		u := out[a.Pipeline]
		class := s.classOf[i]
		u.servers++
		u.cost += s.cluster.Price(class)
		if s.classed() {
			if u.byClass == nil {
				u.byClass = map[string]int{}
			}
			u.byClass[class]++
		}
	}
	return out
}

// use is a pipeline's servers in use.
type use struct {
	servers int
	byClass map[string]int
	cost    float64
}
