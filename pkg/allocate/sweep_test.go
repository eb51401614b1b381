package allocate

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestSweepProven: every plan of the examples' sweeps past their switch points (as the README gives them) is proven
// optimal, with one branch-and-bound worker and with three, at the same system accuracy. An LP Clp leaves unsolved
// costs a proof, and only here does it show: the plan may still be the optimum.
func TestSweepProven(t *testing.T) {
	for _, c := range []struct {
		file           string
		servers        int
		from, to, step float64
	}{
		{"../../examples/traffic.yaml", 20, 400, 1200, 50},
		{"../../examples/ocr-chain.yaml", 6, 200, 500, 25},
	} {
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
