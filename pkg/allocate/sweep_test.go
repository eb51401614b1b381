package allocate

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// sweeps are the examples' sweeps past their switch points.
var sweeps = []struct {
	file           string
	servers        int
	from, to, step float64
}{
	{"../../examples/traffic.yaml", 20, 400, 1200, 50},
	{"../../examples/ocr-chain.yaml", 6, 200, 500, 25},
}

// TestSweepProven: every plan of the examples' sweeps past their switch points (as README.md here gives them) is
// proven optimal, with one branch-and-bound worker and with three, at the same system accuracy. An LP Clp leaves
// unsolved costs a proof, and only here does it show: the plan may still be the optimum.
func TestSweepProven(t *testing.T) {
	for _, c := range sweeps {
		spec, err := pipeline.Load(c.file)
		if err != nil {
			t.Fatal(err)
		}
		for d := c.from; d <= c.to; d += c.step {
			var accuracy [2]float64
			for i, workers := range []int{1, 3} {
				res, err := Solve(Input{Spec: spec, Demand: d, Servers: c.servers}, Options{Workers: workers})
				if err != nil {
					t.Fatalf("%s at %v QPS, %d workers: %v", spec.Name, d, workers, err)
				}
				if !res.Optimal || res.Gap != 0 {
					t.Errorf("%s at %v QPS, %d workers: %s plan, optimal %v, gap %v", spec.Name, d, workers, res.Mode,
						res.Optimal, res.Gap)
				}
				accuracy[i] = res.SystemAccuracy
			}
			if math.Abs(accuracy[0]-accuracy[1]) > 1e-6 {
				t.Errorf("%s at %v QPS: system accuracy %v with one worker, %v with three", spec.Name, d, accuracy[0],
					accuracy[1])
			}
		}
	}
}

// TestGap: a stated optimality tolerance is a bound on what a plan gives up. With a loose one, the search stops as
// soon as no allocation can beat its plan by more than that share: fewer nodes, a plan within the share of the
// optimum. A tolerance out of range is refused.
func TestGap(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []float64{700, 1050} {
		in := Input{Spec: spec, Demand: d, Servers: 20}
		exact, err := Solve(in, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, gap := range []float64{0.01, 0.5} {
			loose, err := Solve(in, Options{Workers: 1, Gap: gap})
			if err != nil {
				t.Fatalf("%v QPS, gap %v: %v", d, gap, err)
			}
			if !loose.Optimal || loose.Mode != exact.Mode {
				t.Errorf("%v QPS, gap %v: %s plan, optimal %v; want an optimal %s plan", d, gap, loose.Mode,
					loose.Optimal, exact.Mode)
			}
			if a, best := loose.SystemAccuracy, exact.SystemAccuracy; a > best+1e-9 || a < best*(1-gap)-1e-9 {
				t.Errorf("%v QPS, gap %v: system accuracy %v, the optimum %v", d, gap, a, best)
			}
			if gap == 0.5 && loose.Nodes >= exact.Nodes {
				t.Errorf("%v QPS: %d nodes with a gap of 0.5, %d proving the optimum", d, loose.Nodes, exact.Nodes)
			}
		}
	}
	for _, gap := range []float64{-0.1, 1, math.NaN()} {
		if _, err := Solve(Input{Spec: spec, Demand: 700, Servers: 20}, Options{Gap: gap}); err == nil {
			t.Errorf("gap %v: no error", gap)
		}
	}
}
