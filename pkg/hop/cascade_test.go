package hop

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestEscalate: the cascade's first variant sends on exactly the items whose confidence is below the plan's
// threshold and that have the time the next variant takes; the next variant and the other variants send nothing on,
// nor does the first under a plan that does not run the cascade.
func TestEscalate(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Pipeline: "cascade", Epoch: 1, Mode: plan.ModeHardware, Cascades: map[string]float64{"classify": 0.6},
		Variants: []plan.VariantPlan{
			plan.NewVariantPlan("detect", spec.Variant("detect", "yolov5m"), 3, 4),
			plan.NewVariantPlan("classify", spec.Variant("classify", "effnet_b0"), 2, 8),
			plan.NewVariantPlan("classify", spec.Variant("classify", "effnet_b7"), 1, 16),
		}}
	table := func(p *plan.Plan, variant string) *Table {
		return NewTable(spec, p, deadline.NewStage(spec, p, deadline.Reroute, "classify", variant, 0, 1), "classify",
			variant, nil)
	}
	first := table(p, "effnet_b0")
	// effnet_b7 at max batch 16 takes 140 ms, and a hop 1 ms.
	for _, tc := range []struct {
		conf float64
		left time.Duration
		next string
		late bool
	}{
		{0.59, time.Second, "effnet_b7", false},
		{0.6, time.Second, "", false},
		{0.95, time.Second, "", false},
		{0.1, 141 * time.Millisecond, "effnet_b7", false},
		{0.1, 140 * time.Millisecond, "", true},
	} {
		next, late := first.Escalate(tc.conf, tc.left)
		if next != tc.next || late != tc.late {
			t.Errorf("confidence %v, %v left: %q (late %v), want %q (late %v)", tc.conf, tc.left, next, late,
				tc.next, tc.late)
		}
	}
	if !first.Escalates() {
		t.Error("the cascade's first does not escalate")
	}
	for _, tb := range []*Table{table(p, "effnet_b7"), table(p, "effnet_b3"), table(&plan.Plan{Variants: p.Variants}, "effnet_b0"),
		table(nil, "effnet_b0")} {
		if next, _ := tb.Escalate(0, time.Second); next != "" || tb.Escalates() {
			t.Errorf("a table that is no cascade's first escalates to %q", next)
		}
	}
}
