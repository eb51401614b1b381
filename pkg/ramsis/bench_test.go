package ramsis

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// BenchmarkSolve computes, per iteration, the policy of each task of the traffic example under its static
// allocation (two hosted variants a task) at 400 QPS, and of classify_car with 2, 3 and 4 of its EfficientNets
// hosted (the grid's points a task: 32, 16, 8 per axis), from no start; it reports each solve's states and value
// iterations. docs/ramsis.md: the computation time.
func BenchmarkSolve(b *testing.B) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	static, err := plan.Static(spec)
	if err != nil {
		b.Fatal(err)
	}
	for _, task := range []string{"detect", "classify_car", "recognize_face"} {
		b.Run("static-"+task, func(b *testing.B) { benchModel(b, spec, static, task, 400) })
	}
	for n := 2; n <= 4; n++ {
		p := &plan.Plan{Pipeline: spec.Name}
		for _, vp := range static.Variants {
			if vp.Task != "classify_car" {
				p.Variants = append(p.Variants, vp)
			}
		}
		for _, v := range []string{"effnet_b7", "effnet_b5", "effnet_b3", "effnet_b0"}[:n] {
			p.Variants = append(p.Variants, plan.NewVariantPlan("classify_car", spec.Variant("classify_car", v), 2, 8))
		}
		b.Run("classify_car-"+string(rune('0'+n)), func(b *testing.B) { benchModel(b, spec, p, "classify_car", 400) })
	}
}

func benchModel(b *testing.B, spec *pipeline.Spec, p *plan.Plan, task string, demand float64) {
	p.Allocation = &plan.Allocation{DemandQPS: demand}
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p, Demand: demand})
	m, _, ok := ModelOf(spec, p, task)
	if !ok {
		b.Fatalf("%s: no choice", task)
	}
	var pol *Policy
	var err error
	for b.Loop() {
		if pol, err = Solve(m, time.Now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pol.States), "states")
	b.ReportMetric(float64(pol.Iterations), "iterations")
}
