package routing

import (
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Served is the largest demand (requests a second at the root) that in.Plan carries under in.Fanout when routed as
// MostAccurateFirst routes it, no hosted variant given more than its capacity (in.Demand and in.Utilization are
// ignored). A plan's own ServedQPS is what its solve found under the factors it was made with; Served re-reads the
// placement under the factors measured since, so that two plans can be compared on what each carries now.
func Served(in Input) float64 {
	in.Utilization = 1
	capacity := make(map[string]float64, len(in.Plan.Variants))
	for _, vp := range in.Plan.Variants {
		if in.Spec.Variant(vp.Task, vp.Variant) != nil {
			capacity[wire.VariantKey{Task: vp.Task, Variant: vp.Variant}.String()] += vp.CapacityQPS
		}
	}
	carries := func(demand float64) bool {
		in.Demand = demand
		_, incoming := mostAccurateFirst(in)
		for key, q := range incoming {
			if q > capacity[key]*(1+1e-9) {
				return false
			}
		}
		return true
	}
	// The root's capacity bounds what the plan carries; the rest is found by bisection (carrying is monotone in the
	// demand: every variant's traffic grows with it).
	hi := 0.0
	for _, vp := range in.Plan.Variants {
		if vp.Task == in.Spec.Root().Name {
			hi += vp.CapacityQPS
		}
	}
	if hi <= 0 {
		return 0
	}
	if carries(hi) {
		return hi
	}
	lo := 0.0
	for range servedSteps {
		mid := (lo + hi) / 2
		if carries(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// servedSteps bisects the root's capacity to within 2^-20 of it.
const servedSteps = 20
