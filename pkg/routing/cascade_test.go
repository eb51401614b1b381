package routing

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestCascadeRoutesToItsFirst: under a plan that runs classify as its cascade, every detector sends all its
// sub-requests to the cascade's first variant, and the next variant's spare capacity (its backup) is what the
// items sent on leave of it; under the same hosting without the cascade, most accurate first.
func TestCascadeRoutesToItsFirst(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vars := []plan.VariantPlan{
		plan.NewVariantPlan("detect", spec.Variant("detect", "yolov5m"), 3, 4),
		plan.NewVariantPlan("classify", spec.Variant("classify", "effnet_b0"), 2, 8),
		plan.NewVariantPlan("classify", spec.Variant("classify", "effnet_b7"), 1, 16),
	}
	routeTo := func(p *plan.Plan) (string, float64) {
		r := MostAccurateFirst(Input{Spec: spec, Plan: p, Demand: 40})
		routes := r.Downstream["detect/yolov5m"]["classify"]
		if len(routes) != 1 || routes[0].Prob != 1 {
			t.Fatalf("routes %+v: want one variant", routes)
		}
		for _, b := range r.Backup["classify"] {
			if b.Variant == "effnet_b7" {
				return routes[0].Variant, b.LeftoverQPS
			}
		}
		return routes[0].Variant, 0
	}
	v, spare := routeTo(&plan.Plan{Variants: vars, Cascades: map[string]float64{"classify": 0.6}})
	e := spec.Task("classify").Cascade.Level(0.6).Escalation
	if want := vars[2].CapacityQPS - 100*e; v != "effnet_b0" || spare < want-1e-9 || spare > want+1e-9 {
		t.Errorf("cascade: routed to %s, effnet_b7 spare %.2f, want effnet_b0 and %.2f", v, spare, want)
	}
	if v, _ := routeTo(&plan.Plan{Variants: vars}); v != "effnet_b7" {
		t.Errorf("no cascade: routed to %s, want the most accurate, effnet_b7", v)
	}
}
