package sim

import (
	"slices"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestFigure: violations are in percent on a log axis; a system's lines share its key in every panel; Loki's
// switches between hardware and accuracy scaling are marked; more than three systems get a violations panel each.
func TestFigure(t *testing.T) {
	result := func(system string) *Result {
		r := &Result{System: system}
		for s := range 6 {
			mode := plan.ModeHardware
			if s >= 2 && s < 4 {
				mode = plan.ModeAccuracy
			}
			r.Seconds = append(r.Seconds, Second{DemandQPS: 100, Arrivals: 100, OK: 99, Late: 1, AccuracySum: 99,
				ActiveServers: 3, EstimateQPS: 100, Mode: mode})
		}
		return r
	}
	three := []*Result{result("proteus"), result("loki:reroute"), result("inferline")}
	f := Figure("t", three, 1)
	if len(f.Panels) != 4 {
		t.Fatalf("%d panels for three systems, want 4", len(f.Panels))
	}
	viol := f.Panels[3]
	if !viol.LogY || len(viol.Series) != 3 || viol.Series[0].Y[0] != 1 {
		t.Errorf("violations panel: log %v, %d series, first value %v: want log, 3, 1 (%%)", viol.LogY,
			len(viol.Series), viol.Series[0].Y[0])
	}
	for _, s := range f.Panels[0].Series[1:] {
		if s.Key == "" || !slices.ContainsFunc(three, func(r *Result) bool { return r.System == s.Key }) {
			t.Errorf("estimate %q has key %q, want its system's", s.Name, s.Key)
		}
	}
	var marks []float64
	for _, m := range f.Marks {
		marks = append(marks, m.X)
	}
	if !slices.Equal(marks, []float64{2, 4}) {
		t.Errorf("marks at %v, want Loki's switches at 2 and 4 s", marks)
	}
	four := append(three, result("static"))
	f = Figure("t", four, 1)
	if len(f.Panels) != 3+4 {
		t.Fatalf("%d panels for four systems, want 3 and one violations panel each", len(f.Panels))
	}
	for i, p := range f.Panels[3:] {
		if len(p.Series) != 1 || p.Series[0].Name != four[i].System || !p.LogY {
			t.Errorf("violations panel %d: %+v", i, p)
		}
	}
}
