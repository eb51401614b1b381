package routing

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

func TestCapacityProportional(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v := func(task, name string, replicas, batch int) plan.VariantPlan {
		return plan.NewVariantPlan(task, spec.Variant(task, name), replicas, batch)
	}
	p := &plan.Plan{Pipeline: spec.Name, Variants: []plan.VariantPlan{
		v("detect", "yolov5x", 2, 8), v("detect", "yolov5n", 1, 8),
		v("classify_car", "effnet_b7", 1, 8),
		v("recognize_face", "arcface_r100", 1, 8), v("recognize_face", "mobilefacenet", 3, 8),
	}}
	r := CapacityProportional(spec, p)

	// Root: yolov5x 2 * 8/190ms = 84.2 QPS, yolov5n 1 * 8/76ms = 105.3 QPS; most accurate listed first.
	wantX := 84.21 / (84.21 + 105.26)
	if len(r.Root) != 2 || r.Root[0].Variant != "yolov5x" || math.Abs(r.Root[0].Prob-wantX) > 1e-3 {
		t.Errorf("root routes %+v, want yolov5x first with %.3f", r.Root, wantX)
	}
	for hop, table := range r.Downstream {
		if len(table) != 2 {
			t.Errorf("%s routes to %d child tasks, want 2", hop, len(table))
		}
		for child, routes := range table {
			sum := 0.0
			for _, rt := range routes {
				sum += rt.Prob
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("%s -> %s: probabilities sum to %v", hop, child, sum)
			}
		}
	}
	if len(r.Downstream) != 2 {
		t.Errorf("downstream tables for %d hosted detect variants, want 2 (leaf variants route nowhere)", len(r.Downstream))
	}
	if got := r.Downstream["detect/yolov5x"]["classify_car"]; len(got) != 1 || got[0].Prob != 1 {
		t.Errorf("one hosted car classifier takes everything: %+v", got)
	}
}
