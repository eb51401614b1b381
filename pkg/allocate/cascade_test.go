package allocate

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

func cascadeSpecFile(t *testing.T) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestGearPlanAccountsForTheCascade: with room for the most accurate detector, the gear plan runs classify as its
// cascade at the threshold of the most accurate level; its accuracy is the detector's times the level's (items kept
// and items sent on), and it hosts the next variant for the share of items the level sends on.
func TestGearPlanAccountsForTheCascade(t *testing.T) {
	spec := cascadeSpecFile(t)
	r, err := SolveCascade(Input{Spec: spec, Demand: 100, Servers: 10, Utilization: 0.85}, Options{Workers: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := spec.Task("classify").Cascade
	best := c.Levels[0]
	for _, l := range c.Levels {
		if l.Value() > best.Value() {
			best = l
		}
	}
	th, ok := r.Cascades["classify"]
	if !ok || th != best.Threshold {
		t.Fatalf("cascades %v, want classify at %v (the most accurate level)", r.Cascades, best.Threshold)
	}
	if want := 0.454 * best.Value(); r.Mode != ModeHardware || math.Abs(r.SystemAccuracy-want) > 1e-6 {
		t.Errorf("mode %s, accuracy %.6f, want hardware at %.6f", r.Mode, r.SystemAccuracy, want)
	}
	load := map[string]float64{}
	for _, h := range r.Variants {
		if h.Task != "detect" && h.Task != "classify" {
			t.Errorf("hosts %s/%s: not a task of the pipeline", h.Task, h.Variant)
		}
		load[h.Task+"/"+h.Variant] += h.LoadQPS
	}
	first, next := load["classify/effnet_b0"], load["classify/effnet_b7"]
	if math.Abs(first-250) > 1e-6 || math.Abs(next-250*best.Escalation) > 1e-6 {
		t.Errorf("loads %v: want 250 items/s on effnet_b0 and %.1f sent on", load, 250*best.Escalation)
	}
	p := r.Plan(spec.Name, 1)
	if p.Cascades["classify"] != th {
		t.Errorf("plan cascades %v", p.Cascades)
	}
}

// TestGearPlanChoosesTheBest: the gear plan is at least as accurate as the plain allocation at every demand, and
// where the cascade is worth its second stage (150 QPS) it is chosen and more accurate; at 300 QPS, where the plain
// allocation's middle classifier beats every threshold, it is not. Measured escalation rates scale the levels'.
func TestGearPlanChoosesTheBest(t *testing.T) {
	spec := cascadeSpecFile(t)
	opt := Options{Workers: 1}
	for _, tc := range []struct {
		demand  float64
		cascade bool
	}{{150, true}, {300, false}} {
		in := Input{Spec: spec, Demand: tc.demand, Servers: 10, Utilization: 0.85}
		plain, err := Solve(in, opt)
		if err != nil {
			t.Fatal(err)
		}
		r, err := SolveCascade(in, opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		gain := r.SystemAccuracy - plain.SystemAccuracy
		if (len(r.Cascades) > 0) != tc.cascade || gain < -1e-9 || tc.cascade && gain < 0.01 {
			t.Errorf("at %v QPS: cascades %v at accuracy %.4f, plain %.4f", tc.demand, r.Cascades,
				r.SystemAccuracy, plain.SystemAccuracy)
		}
	}
	// Measured escalation twice the profile's: the gear plan sends more on and must host more for it.
	scaled, err := SolveCascade(Input{Spec: spec, Demand: 100, Servers: 10, Utilization: 0.85}, Options{Workers: 1},
		map[string]float64{"classify": 2})
	if err != nil {
		t.Fatal(err)
	}
	var next float64
	for _, h := range scaled.Variants {
		if h.Variant == "effnet_b7" {
			next += h.LoadQPS
		}
	}
	l := spec.Task("classify").Cascade.Level(scaled.Cascades["classify"])
	if want := 250 * min(1, 2*l.Escalation); math.Abs(next-want) > 1e-6 {
		t.Errorf("escalation scaled by 2: %.1f items/s sent on, want %.1f", next, want)
	}
}

// TestGearChainWeights: in a tree with several leaves, a gear weighs each chain as the spec does: the items a
// cascade sends on are its chain's items, not more of them.
func TestGearChainWeights(t *testing.T) {
	data, err := os.ReadFile("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(data), "      - name: effnet_b0\n        accuracy: 0.771\n",
		"      - name: effnet_b0\n        accuracy: 0.771\n        confidence: {right: {mean: 0.8, sd: 0.15}, wrong: {mean: 0.45, sd: 0.2}}\n", 1)
	y = strings.Replace(y, "  - name: recognize_face\n",
		"    cascade: {variants: [effnet_b0, effnet_b7], thresholds: [0.6]}\n  - name: recognize_face\n", 1)
	spec, err := pipeline.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	tasks := spec.Cascades()
	if len(tasks) != 1 {
		t.Fatalf("cascades %v", tasks)
	}
	names := nextTasks(spec, tasks)
	g := Input{Spec: cascadeSpec(spec, tasks, names, []float64{0.6}, nil), cascadeNext: map[string]bool{names[0]: true}}
	want := chainWeights(Input{Spec: spec}, spec.Chains())
	got := chainWeights(g, g.Spec.Chains())
	if len(got) != len(want) {
		t.Fatalf("%d chains in the gear, %d in the spec", len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("chain %d: weight %v in the gear, %v in the spec", i, got[i], want[i])
		}
	}
}

// TestGearPathLevels: where the profile measured a cascade's levels per path (the OCR cascade's, per detector), a
// gear's path through both stages is worth that path's level (its own escalation weighing its kept and sent-on
// lines), not the task's escalation: det_v4_960's crops go on at another rate than the labelled set's lines.
func TestGearPathLevels(t *testing.T) {
	spec, err := pipeline.Load("../../examples/ocr-cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tasks := spec.Cascades()
	names := nextTasks(spec, tasks)
	c := tasks[0].Cascade
	checked := 0
	for _, th := range c.Thresholds {
		g := cascadeSpec(spec, tasks, names, []float64{th}, nil)
		for _, p := range c.Paths {
			pl, _ := c.PathLevel(p.Path, th)
			path := append(append([]string(nil), p.Path...), tasks[0].Name+"/"+c.Variants[0],
				names[0]+"/"+c.Variants[1])
			if got, want := g.PathAccuracyOf(path), pl.Value(); math.Abs(got-want) > 1e-9 {
				t.Errorf("threshold %v, path %v: %.4f, want the path's level %.4f (task's escalation %.3f, "+
					"path's %.3f)", th, p.Path, got, want, c.Level(th).Escalation, pl.Escalation)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("the example's profile has no path levels")
	}
}
