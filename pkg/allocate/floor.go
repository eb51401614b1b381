// An accuracy floor (Input.MinAccuracy): the fewest servers, or the least cost, whose system accuracy is at least
// the floor, in place of the hardware and accuracy steps; when the servers cannot serve the demand at the floor, the
// most they serve at it (the rest is refused, docs/admission.md).

package allocate

import (
	"fmt"
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// floorTieBreakShare is how much of the lightest server's weight the floor step's whole accuracy term is worth: less
// than one server (or the cheapest class's price), so that no accuracy is bought with a server, and far above the
// solver's gap, so that of plans on as few servers the most accurate wins.
const floorTieBreakShare = 0.1

// floorTieBreakOf is the floor step's weight of the system accuracy (at most 1) in its objective's units.
func floorTieBreakOf(in Input) float64 {
	c := in.cluster()
	lightest := 1.0
	if c.Priced() {
		lightest = math.Inf(1)
		for _, sc := range c {
			if sc.Servers > 0 && sc.PricePerHour > 0 {
				lightest = min(lightest, sc.PricePerHour*priceScale(c))
			}
		}
	}
	return floorTieBreakShare * lightest
}

// heaviestServer is the largest weight of a replica in the model's server objective (serverWeight).
func (m *model) heaviestServer() float64 {
	w := 1.0
	for _, kv := range m.variants {
		w = max(w, m.serverWeight(kv))
	}
	return w
}

// checkFloor says what is wrong with the input's accuracy floor, if anything.
func (in Input) checkFloor() error {
	if !(in.MinAccuracy >= 0 && in.MinAccuracy <= 1) {
		return fmt.Errorf("allocate: minimum accuracy %v: want a share in [0, 1]", in.MinAccuracy)
	}
	return nil
}

// solveFloor is Solve with an accuracy floor: the floor step (every variant, the fewest servers or least cost at a
// system accuracy of at least the floor), reported in hardware mode, since it has servers to spare as hardware
// scaling does; when it has no point, the largest demand the servers serve at the floor (the max-demand step with
// the floor's row) and the floor step at that demand, in overloaded mode: what it cannot serve at the floor is not
// planned for.
func (s *solving) solveFloor() (*Result, error) {
	in := s.in
	m, err := build(in, stepFloor)
	if err != nil {
		return nil, err
	}
	sol, err := s.solveModel(m)
	if err != nil {
		return nil, err
	}
	if sol.X != nil {
		return s.served(m, sol, ModeHardware)
	}
	dmax, mmax, xmax, err := s.maxServable()
	if err != nil {
		return nil, err
	}
	res := s.res
	res.MaxServableQPS, res.Mode = dmax, ModeOverloaded
	if dmax >= in.Demand*(1-1e-9) && xmax != nil {
		// The floor step stopped at its limit with no point, but the demand is servable at the floor: the
		// max-demand step's point, its flows scaled down to the demand.
		mmax.read(milp.Result{Status: milp.Limit, X: scaleFlows(mmax, xmax, in.Demand)}, res)
		res.Mode = ModeHardware
		return s.finish(res)
	}
	if dmax <= 0 {
		res.ServedQPS = 0
		return s.finish(res)
	}
	at := in
	at.Demand = dmax * (1 - 1e-7) // just inside, so that tolerances do not make it infeasible
	at.headroomDemand = in.Demand
	if m, err = build(at, stepFloor); err != nil {
		return nil, err
	}
	if sol, err = s.solveModel(m); err != nil {
		return nil, err
	}
	if sol.X != nil {
		m.read(sol, res)
	} else {
		mmax.read(milp.Result{Status: milp.Limit, X: scaleFlows(mmax, xmax, at.Demand)}, res)
	}
	res.ServedQPS = at.Demand
	return s.finish(res)
}
