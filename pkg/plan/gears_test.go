package plan

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestGearedLeafAccuracy: a leaf of a cascade that ran at a gear's threshold counts at that level, not the plan's; a
// leaf without one (gear 0) at the plan's; a gear table of a task the plan runs no cascade on, or out of order, is
// refused.
func TestGearedLeafAccuracy(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{Cascades: map[string]float64{"classify": 0.7}}
	kept := []string{"detect/yolov5m", "classify/effnet_b0"}
	sentOn := append(append([]string(nil), kept...), "classify/effnet_b7")
	for i, path := range [][]string{kept, sentOn} {
		at5 := spec.CascadePathAccuracy(path, map[string]float64{"classify": 0.5})
		if got := p.GearedLeafAccuracy(spec, path, 0.5); got != at5 {
			t.Errorf("%v at gear 0.5: %v, want %v", path, got, at5)
		}
		// The kept items' accuracy moves with the threshold; effnet_b7's, independent of effnet_b0's, does not.
		if got, want := p.GearedLeafAccuracy(spec, path, 0), p.LeafAccuracy(spec, path); got != want ||
			i == 0 && got == at5 {
			t.Errorf("%v without a gear: %v, want the plan's %v (not the gear's %v)", path, got, want, at5)
		}
	}
	p.Gears = map[string][]Gear{"classify": {{MaxLoad: 100, Threshold: 0.7}, {MaxLoad: 150, Threshold: 0.5}}}
	if err := p.checkGears(spec); err != nil {
		t.Errorf("a good table: %v", err)
	}
	p.Gears["classify"][1].MaxLoad = 90
	if p.checkGears(spec) == nil {
		t.Error("loads out of order: no error")
	}
	p.Gears = map[string][]Gear{"detect": {{MaxLoad: 1, Threshold: 0.5}}}
	if p.checkGears(spec) == nil {
		t.Error("a table of a task without a cascade: no error")
	}
}

// TestGearBatches: a gear's batches must be of the cascade's variants and at one of the spec's batch sizes; the plan
// in a gear runs the variants it lists at its max batch and budget, the others and the plan itself as they are.
func TestGearBatches(t *testing.T) {
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{Cascades: map[string]float64{"classify": 0.7}, Variants: []VariantPlan{
		{Task: "classify", Variant: "effnet_b0", Replicas: 2, MaxBatch: 8, BudgetMs: 33},
		{Task: "classify", Variant: "effnet_b7", Replicas: 1, MaxBatch: 4, BudgetMs: 44}}}
	g := Gear{MaxLoad: 100, Threshold: 0.7, Batches: map[string]GearBatch{"effnet_b0": {MaxBatch: 16, BudgetMs: 61}}}
	p.Gears = map[string][]Gear{"classify": {g}}
	if err := p.checkGears(spec); err != nil {
		t.Errorf("a good gear: %v", err)
	}
	for _, bad := range []map[string]GearBatch{{"effnet_b3": {MaxBatch: 16, BudgetMs: 94}},
		{"effnet_b0": {MaxBatch: 12, BudgetMs: 50}}, {"effnet_b0": {MaxBatch: 16, BudgetMs: -1}}} {
		p.Gears["classify"][0].Batches = bad
		if p.checkGears(spec) == nil {
			t.Errorf("batches %v: no error", bad)
		}
	}
	q := p.InGear("classify", g)
	if b0, b7 := q.Find("classify", "effnet_b0"), q.Find("classify", "effnet_b7"); b0.MaxBatch != 16 ||
		b0.BudgetMs != 61 || b7.MaxBatch != 4 || p.Find("classify", "effnet_b0").MaxBatch != 8 {
		t.Errorf("in the gear: %+v; the plan: %+v", q.Variants, p.Variants)
	}
	if p.InGear("classify", Gear{Threshold: 0.5}) != p {
		t.Error("a gear at the plan's batches: not the plan itself")
	}
}
