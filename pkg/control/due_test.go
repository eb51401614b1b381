package control

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestDueReplanKeepsAHardwarePlanNoBetter: in hardware mode, with the headroom covering a small rise of the estimate,
// a due look's plan on the same servers at no more accuracy (other batch sizes) is not a new epoch; one with more
// accuracy is; and without headroom, where the plan in force was sized for the estimate alone, the new one is
// taken.
func TestDueReplanKeepsAHardwarePlanNoBetter(t *testing.T) {
	ocr := ocrSpec(t)
	mk := func(batch int, acc, demand float64) *plan.Plan {
		return ocrPlan(ocr, plan.ModeHardware, batch, acc, demand, "")
	}
	for _, c := range []struct {
		name     string
		headroom float64
		next     *plan.Plan
		replans  bool
	}{
		{"other batch sizes, the same accuracy", 0, mk(2, 0.60, 12.65), false},
		{"a little less accuracy", 0, mk(2, 0.59, 12.65), false},
		{"more accuracy", 0, mk(2, 0.61, 12.65), true},
		{"no headroom: sized for the estimate alone", -1, mk(2, 0.60, 11), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// 10% more: within the headroom's 11.5
			cur := mk(1, 0.60, cfgPlanned(c.headroom, 10))
			if got := dueLookReplans(ocr, Config{Headroom: c.headroom}, cur, c.next, 10, 2); got != c.replans {
				t.Fatalf("re-planned %v, want %v", got, c.replans)
			}
		})
	}
}

// dueLookReplans says whether a loop whose plan in force is cur, published at demand on servers, re-plans at a due
// look 11 s later, the demand 10% higher (due after ReplanEvery, not forced), when the solve returns next.
func dueLookReplans(spec *pipeline.Spec, cfg Config, cur, next *plan.Plan, demand float64, servers int) bool {
	return dueLook(spec, cfg, cur, next, demand, servers, 1.1).Replanned
}

// dueLook is the step of dueLookReplans's due look, the demand moved by the factor rise.
func dueLook(spec *pipeline.Spec, cfg Config, cur, next *plan.Plan, demand float64, servers int, rise float64) Step {
	solved := cur
	l := New(spec, cfg, fixed{&solved}, cur)
	t0 := time.Unix(1000, 0)
	o := Observed{Demand: demand, Servers: servers}
	l.Published(l.Next(t0, o), o, t0)
	solved = next
	o.Demand = demand * rise
	return l.Next(t0.Add(11*time.Second), o)
}

// TestEverySolveIsReported: a step that solved says so, with the solve's time and what became of its plan, whether
// or not it made a new epoch; a due look that found no move worth a solve reports none.
func TestEverySolveIsReported(t *testing.T) {
	ocr := ocrSpec(t)
	mk := func(batch int, acc float64) *plan.Plan {
		p := ocrPlan(ocr, plan.ModeHardware, batch, acc, 12.65, "")
		p.Allocation.SolveMs = 250
		return p
	}
	cur := mk(1, 0.60)
	for _, c := range []struct {
		name    string
		next    *plan.Plan
		rise    float64
		outcome string // "": no solve
	}{
		{"a new plan", mk(2, 0.61), 1.1, SolveNewPlan},
		{"the allocation in force", mk(1, 0.60), 1.1, SolveSame},
		{"another allocation not worth its swaps", mk(2, 0.60), 1.1, SolveNotTaken},
		{"no move worth a solve", mk(2, 0.61), 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := dueLook(ocr, Config{}, cur, c.next, 10, 2, c.rise)
			switch {
			case c.outcome == "" && st.Solved != nil:
				t.Fatalf("reported a solve %+v where none ran", *st.Solved)
			case c.outcome == "":
			case st.Solved == nil:
				t.Fatalf("no solve reported, want %s", c.outcome)
			case st.Solved.Outcome != c.outcome || st.Solved.Trigger != TriggerDue || st.Solved.Ms != 250:
				t.Fatalf("solve %+v, want %s by %s in 250 ms", *st.Solved, c.outcome, TriggerDue)
			}
			if st.Replanned != (c.outcome == SolveNewPlan) {
				t.Fatalf("re-planned %v with a solve %s", st.Replanned, c.outcome)
			}
		})
	}
}

// cfgPlanned is the demand a plan for estimate d is sized for under headroom h (Config.Planned, padded).
func cfgPlanned(h, d float64) float64 {
	c := Config{Headroom: h}
	c.SetDefaults()
	return c.Planned(d, true)
}

func ocrSpec(t *testing.T) *pipeline.Spec { return exampleSpec(t, "ocr") }

// ocrPlan is a plan of the OCR example on 2 servers in mode, one replica of each task's first variant, the
// detector's at max batch batch on class (its suffix: "@fast"; "": the default class), sized for demand.
func ocrPlan(ocr *pipeline.Spec, mode string, batch int, acc, demand float64, class string) *plan.Plan {
	det, rec := ocr.Tasks[0], ocr.Tasks[1]
	return &plan.Plan{Pipeline: ocr.Name, Mode: mode,
		Allocation: &plan.Allocation{DemandQPS: demand, SystemAccuracy: acc, ActiveServers: 2},
		Variants: []plan.VariantPlan{
			{Task: det.Name, Variant: det.Variants[0].Name + class, Replicas: 1, MaxBatch: batch, BudgetMs: 100,
				CapacityQPS: 20},
			{Task: rec.Name, Variant: rec.Variants[0].Name, Replicas: 1, MaxBatch: 1, BudgetMs: 100, CapacityQPS: 20}}}
}

// TestDueReplanAtOverloadKeepsTheSlack: under overload, a due look's plan that hosts each task on the same servers
// with a more accurate variant mix (one of two car classifiers a notch better) and serves no more is not a new epoch;
// one that serves more, one that moves a server to another task, and the same upgrade out of overload are.
func TestDueReplanAtOverloadKeepsTheSlack(t *testing.T) {
	traffic := exampleSpec(t, "traffic")
	// mk is a plan on 6 servers: three detectors, the car classifiers given (replicas by variant), faces face
	// recognisers.
	mk := func(mode string, acc, served float64, cars map[string]int, faces int) *plan.Plan {
		p := &plan.Plan{Pipeline: traffic.Name, Mode: mode,
			Allocation: &plan.Allocation{DemandQPS: 660, ServedQPS: served, SystemAccuracy: acc, ActiveServers: 6},
			Variants: []plan.VariantPlan{{Task: "detect", Variant: "yolov5n", Replicas: 3, MaxBatch: 16},
				{Task: "recognize_face", Variant: "arcface_r18", Replicas: faces, MaxBatch: 32}}}
		for _, car := range []string{"effnet_b0", "effnet_b1"} {
			if n := cars[car]; n > 0 {
				p.Variants = append(p.Variants, plan.VariantPlan{Task: "classify_car", Variant: car, Replicas: n,
					MaxBatch: 32})
			}
		}
		return p
	}
	over, acc := plan.ModeOverloaded, plan.ModeAccuracy
	b0 := map[string]int{"effnet_b0": 2}
	upgraded := map[string]int{"effnet_b0": 1, "effnet_b1": 1}
	b1 := map[string]int{"effnet_b1": 1}
	for _, c := range []struct {
		name      string
		cur, next *plan.Plan
		replans   bool
	}{
		{"a car classifier upgraded on the same servers", mk(over, 0.227, 330, b0, 1), mk(over, 0.229, 330, upgraded, 1),
			false},
		{"the same, serving 1% more", mk(over, 0.227, 330, b0, 1), mk(over, 0.229, 333, upgraded, 1), false},
		{"serving 5% more", mk(over, 0.227, 330, b0, 1), mk(over, 0.229, 346, upgraded, 1), true},
		{"a server moved between tasks", mk(over, 0.227, 330, b0, 1), mk(over, 0.229, 330, b1, 2), true},
		{"out of overload", mk(acc, 0.227, 660, b0, 1), mk(acc, 0.229, 660, upgraded, 1), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := dueLookReplans(traffic, Config{Headroom: -1}, c.cur, c.next, 660, 6); got != c.replans {
				t.Fatalf("re-planned %v, want %v", got, c.replans)
			}
		})
	}
}
