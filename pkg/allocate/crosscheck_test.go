package allocate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// randomInstance is a small random allocation problem: a chain or a tree of 2-3 tasks, 2-3 variants per task with
// linear batch latency profiles, random multiplicative factors, SLO, demand and cluster size.
func randomInstance(seed uint64) Input {
	r := rand.New(rand.NewPCG(seed, 0xa110c))
	batches := [][]int{{1, 2, 4}, {1, 2, 4, 8}, {1, 4}}[r.IntN(3)]
	shape := r.IntN(3) // 0: chain of 2, 1: chain of 3, 2: tree a -> {b, c}
	names := []string{"a", "b", "c"}
	ntasks := map[int]int{0: 2, 1: 3, 2: 3}[shape]
	spec := &pipeline.Spec{Name: fmt.Sprintf("rand%d", seed), BatchSizes: batches, CommLatencyMs: float64(r.IntN(3))}
	for ti := 0; ti < ntasks; ti++ {
		t := pipeline.Task{Name: names[ti]}
		switch {
		case shape == 2 && ti == 0:
			t.Children = []string{"b", "c"}
		case shape != 2 && ti+1 < ntasks:
			t.Children = []string{names[ti+1]}
		}
		nv := 2 + r.IntN(2)
		for vi := 0; vi < nv; vi++ {
			v := pipeline.Variant{Name: fmt.Sprintf("v%d", vi), Accuracy: 0.5 + 0.45*r.Float64(),
				Executor: pipeline.Executor{Kind: pipeline.ExecutorEmulated}}
			a, c := 5+35*r.Float64(), 2+18*r.Float64()
			for _, b := range batches {
				l := math.Round((a+c*float64(b))*10) / 10
				v.Profile = append(v.Profile, pipeline.ProfilePoint{Batch: b, P50Ms: l, P95Ms: 1.2 * l})
			}
			if len(t.Children) > 0 {
				f := &pipeline.Fanout{Mean: math.Round((0.5+2.5*r.Float64())*100) / 100}
				if len(t.Children) == 2 {
					s := math.Round((0.2+0.6*r.Float64())*100) / 100
					f.Shares = map[string]float64{"b": s, "c": 1 - s}
				}
				v.Fanout = f
			}
			t.Variants = append(t.Variants, v)
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	spec.SLOMs = float64(2 * (60 + r.IntN(200)))
	return Input{Spec: spec, Demand: float64(5 + r.IntN(150)), Servers: 2 + r.IntN(7)}
}

// TestCrossCheckWithCBC solves each step's MILP of 200 random instances and of the examples with the
// branch-and-bound, and the complete model (constraint 7 written out with path indicators) with CBC: the statuses and objectives must agree, and our
// solution must satisfy the complete model. A solve that stops at its time limit must bracket CBC's optimum between
// its best point and its bound.
func TestCrossCheckWithCBC(t *testing.T) {
	if _, _, err := milp.SolveCBC(context.Background(), &milp.Problem{Obj: []float64{1}, Lower: []float64{0},
		Upper: []float64{1}, Integer: []bool{false}, Names: []string{"x"}, Priority: []int{0}}); errors.Is(err, milp.ErrNoCBC) {
		t.Skip("CBC is needed for the cross-check: ", err, " (make deps installs it)")
	}
	n := 200
	if testing.Short() {
		n = 40
	}
	var instances []Input
	for seed := uint64(0); seed < uint64(n); seed++ {
		instances = append(instances, randomInstance(seed))
	}
	// The example pipelines, around their switch points. CBC takes minutes on their complete (big-M) models, so it
	// solves the same model as ours there; our solution must still satisfy the complete model.
	examples := map[int]bool{}
	for _, ex := range []struct {
		file    string
		servers int
		demands []float64
	}{
		{"../../examples/traffic.yaml", 20, []float64{300, 450, 600}},
		{"../../examples/ocr-chain.yaml", 6, []float64{150, 250}},
	} {
		spec, err := pipeline.Load(ex.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ex.demands {
			examples[len(instances)] = true
			instances = append(instances, Input{Spec: spec, Demand: d, Servers: ex.servers})
		}
	}
	compared, limited := 0, 0
	for i, in := range instances {
		for _, st := range []step{stepHardware, stepAccuracy, stepMaxDemand} {
			m, err := build(in, st)
			if err != nil {
				continue // no path fits the SLO: nothing to solve
			}
			ours, err := m.solve(Options{TimeLimit: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			complete, point := m.complete()
			toCBC := complete
			if examples[i] {
				toCBC = m.prob
			}
			cst, cobj, err := milp.SolveCBC(ctx, toCBC)
			cancel()
			if err != nil {
				t.Fatalf("instance %d step %d: %v", i, st, err)
			}
			name := fmt.Sprintf("instance %d (%s, %v QPS, %d servers) step %d", i, in.Spec.Name, in.Demand, in.Servers, st)
			if ours.Status == milp.Limit {
				// Not proven: CBC's optimum must lie between our best point and our bound.
				limited++
				lo, hi := ours.Objective, ours.Bound
				if ours.X == nil {
					lo = math.Inf(-1)
				}
				if m.prob.Sense == milp.Minimize {
					lo, hi = ours.Bound, ours.Objective
					if ours.X == nil {
						hi = math.Inf(1)
					}
				}
				tol := 1e-5 * max(1, math.Abs(cobj))
				if cst == milp.Infeasible && ours.X == nil {
					t.Logf("%s: stopped at the time limit without a point; CBC says infeasible", name)
					continue
				}
				if cst != milp.Optimal || cobj < lo-tol || cobj > hi+tol {
					t.Errorf("%s: stopped at its limit with [%g, %g]; CBC says %s %g", name, lo, hi, cst, cobj)
				}
				t.Logf("%s: stopped at the time limit, gap %.3g; CBC's optimum %g lies within it", name, ours.Gap, cobj)
				continue
			}
			if ours.Status != cst {
				t.Errorf("%s: we say %s (%v), CBC says %s (%v)", name, ours.Status, ours.Objective, cst, cobj)
				continue
			}
			if cst == milp.Optimal {
				if d := math.Abs(ours.Objective - cobj); d > 1e-5*max(1, math.Abs(cobj)) {
					t.Errorf("%s: objective %.9g, CBC %.9g", name, ours.Objective, cobj)
				}
				// Our solution satisfies the paper's formulation too, with I(p) = 1 on the paths that carry traffic.
				if v := complete.Violation(point(ours.X)); v > 1e-6 {
					t.Errorf("%s: our solution violates the complete model by %g", name, v)
				}
			}
			compared++
		}
	}
	t.Logf("%d models compared with CBC; %d stopped at the time limit", compared+limited, limited)
}

// TestModelTooLarge: a pipeline whose model would exceed MaxFlowColumns gets a clear error instead of gigabytes of
// columns; its hardware step (one variant per task) still solves.
func TestModelTooLarge(t *testing.T) {
	spec := chainSpec(4, 6)
	res, err := Solve(Input{Spec: spec, Demand: 120, Servers: 16}, Options{})
	if err != nil || res.Mode != ModeHardware {
		t.Fatalf("hardware step: %v, %+v", err, res)
	}
	_, err = Solve(Input{Spec: spec, Demand: 300, Servers: 16}, Options{})
	if !errors.Is(err, ErrModelTooLarge) {
		t.Fatalf("got %v, want ErrModelTooLarge", err)
	}
}
