package control

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestDueReplanAtOverload: while the plan in force is overloaded (the admission bound holds every queue full), a
// due re-plan that moves workers must carry more correct answers than the moves cost. One that moves a classifier
// between variants for a ten-thousandth of accuracy is not published, though the examples declare no model swap time;
// one that moves a worker to the stage the factors measured since overfill is.
func TestDueReplanAtOverload(t *testing.T) {
	spec := trafficSpec(t)
	mk := func(acc float64, car map[string]int, faces int) *plan.Plan {
		p := &plan.Plan{Pipeline: spec.Name, Mode: plan.ModeOverloaded,
			Allocation: &plan.Allocation{DemandQPS: 1600, ServedQPS: 1000, SystemAccuracy: acc, ActiveServers: 20,
				ClusterServers: 20},
			Variants: []plan.VariantPlan{{Task: "detect", Variant: "yolov5n", Replicas: 10, MaxBatch: 16, BudgetMs: 100,
				CapacityQPS: 1000}}}
		for _, v := range []string{"effnet_b0", "effnet_b1"} {
			if n := car[v]; n > 0 {
				p.Variants = append(p.Variants, plan.VariantPlan{Task: "classify_car", Variant: v, Replicas: n,
					MaxBatch: 32, BudgetMs: 100, CapacityQPS: 250 * float64(n)})
			}
		}
		p.Variants = append(p.Variants, plan.VariantPlan{Task: "recognize_face", Variant: "arcface_r18",
			Replicas: faces, MaxBatch: 32, BudgetMs: 100, CapacityQPS: 220 * float64(faces)})
		return p
	}
	// yolov5n's 2 sub-requests a frame, 70% to classify_car: 1,400 and 600 items a second at 1,000 frames.
	split := func(face float64) map[string]pipeline.Fanout {
		return map[string]pipeline.Fanout{"detect/yolov5n": {Mean: 2,
			Shares: map[string]float64{"classify_car": 1 - face, "recognize_face": face}}}
	}
	current := mk(0.227, map[string]int{"effnet_b0": 6}, 3)
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name    string
		next    *plan.Plan
		fanout  map[string]pipeline.Fanout
		replans bool
	}{
		{"a classifier moved for less accuracy", mk(0.226, map[string]int{"effnet_b0": 5, "effnet_b1": 1}, 3), split(0.3), false},
		{"a classifier moved for a ten-thousandth more", mk(0.2271, map[string]int{"effnet_b0": 5, "effnet_b1": 1}, 3), split(0.3), false},
		{"a worker moved to the faces the factors overfill", mk(0.226, map[string]int{"effnet_b0": 5}, 4), split(0.4), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			next := current
			l := New(spec, Config{Headroom: -1}, fixed{&next}, current)
			o := Observed{Demand: 1600, Servers: 20, Fanout: split(0.3)}
			st := l.Next(t0, o)
			l.Published(st, o, t0)
			next = c.next
			o.Demand, o.Fanout = 1700, c.fanout // a small move: due after ReplanEvery, not forced
			st = l.Next(t0.Add(11*time.Second), o)
			if st.Replanned != c.replans {
				t.Fatalf("re-planned %v, want %v", st.Replanned, c.replans)
			}
		})
	}
}
