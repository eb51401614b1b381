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
	t0 := time.Unix(1000, 0)
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
			first := cfgPlanned(c.headroom, 10)
			next := mk(1, 0.60, first)
			l := New(ocr, Config{Headroom: c.headroom}, fixed{&next}, mk(1, 0.60, first))
			o := Observed{Demand: 10, Servers: 2}
			st := l.Next(t0, o)
			l.Published(st, o, t0)
			next = c.next
			o.Demand = 11 // 10% more: within the headroom's 11.5, due after ReplanEvery
			st = l.Next(t0.Add(11*time.Second), o)
			if st.Replanned != c.replans {
				t.Fatalf("re-planned %v, want %v", st.Replanned, c.replans)
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
