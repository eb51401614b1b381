package pipeline

import (
	"math"
	"os"
	"strings"
	"testing"
)

func cascadeExample(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCascadeErrors: a cascade that cannot run is refused with a message that says why.
func TestCascadeErrors(t *testing.T) {
	base := string(cascadeExample(t))
	for _, tc := range []struct{ what, old, new, want string }{
		{"three variants", "variants: [effnet_b0, effnet_b7]", "variants: [effnet_b0, effnet_b3, effnet_b7]",
			"maxItems"},
		{"twice", "variants: [effnet_b0, effnet_b7]", "variants: [effnet_b0, effnet_b0]", `"effnet_b0" twice`},
		{"unknown", "variants: [effnet_b0, effnet_b7]", "variants: [effnet_b0, effnet_b9]", `no variant "effnet_b9"`},
		{"no confidence", "variants: [effnet_b0, effnet_b7]", "variants: [effnet_b3, effnet_b7]",
			`"effnet_b3" needs a confidence`},
		{"no thresholds", "      thresholds: [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]\n", "", "levels or thresholds required"},
		{"unsorted", "thresholds: [0.3, 0.4", "thresholds: [0.4, 0.3", "thresholds must increase"},
		{"above 1", "thresholds: [0.3", "thresholds: [1.3", "maximum"},
		{"not a leaf", "  - name: detect\n    children: [classify]\n    variants:",
			"  - name: detect\n    children: [classify]\n    cascade: {variants: [yolov5s, yolov5m], thresholds: [0.5]}\n    variants:",
			"must be a leaf task"},
	} {
		if !strings.Contains(base, tc.old) {
			t.Fatalf("%s: the example has no %q", tc.what, tc.old)
		}
		_, err := Parse([]byte(strings.Replace(base, tc.old, tc.new, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.what, err, tc.want)
		}
	}
}

// TestCascadeLevels: the levels computed from the emulated confidence are what the normal's tails say, and a
// higher threshold sends more items on and keeps more accurate ones.
func TestCascadeLevels(t *testing.T) {
	s, err := Parse(cascadeExample(t))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Task("classify").Cascade
	if len(c.Levels) != len(c.Thresholds) {
		t.Fatalf("%d levels for %d thresholds", len(c.Levels), len(c.Thresholds))
	}
	// At 0.6: right answers N(0.8, 0.15) below 0.6 with probability Phi(-4/3), wrong ones N(0.45, 0.2) with Phi(0.75).
	rb, wb := 0.5*math.Erfc(4.0/3/math.Sqrt2), 0.5*math.Erfc(-0.75/math.Sqrt2)
	e := 0.771*rb + 0.229*wb
	l := c.Level(0.6)
	if math.Abs(l.Escalation-e) > 1e-12 || math.Abs(l.Accuracy-0.771*(1-rb)/(1-e)) > 1e-12 || l.NextAccuracy != 0.843 {
		t.Errorf("level at 0.6: %+v, want escalation %v", l, e)
	}
	for i := 1; i < len(c.Levels); i++ {
		a, b := c.Levels[i-1], c.Levels[i]
		if !(b.Escalation > a.Escalation && b.Accuracy > a.Accuracy) {
			t.Errorf("level %+v after %+v: more escalation and accuracy wanted", b, a)
		}
	}
}

// TestCascadePathAccuracy: a leaf the cascade's first kept is worth the level's accuracy on kept items, one sent on
// the next variant's on those, each in proportion to its path's; other paths are as before.
func TestCascadePathAccuracy(t *testing.T) {
	s, err := Parse(cascadeExample(t))
	if err != nil {
		t.Fatal(err)
	}
	l := s.Task("classify").Cascade.Level(0.5)
	th := map[string]float64{"classify": 0.5}
	for _, tc := range []struct {
		path []string
		want float64
	}{
		{[]string{"detect/yolov5m", "classify/effnet_b0"}, 0.454 * l.Accuracy},
		{[]string{"detect/yolov5m", "classify/effnet_b0", "classify/effnet_b7"}, 0.454 * l.NextAccuracy},
		{[]string{"detect/yolov5m", "classify/effnet_b7"}, 0.454 * 0.843},
		{[]string{"detect/yolov5m", "classify/effnet_b3"}, 0.454 * 0.817},
	} {
		if got := s.CascadePathAccuracy(tc.path, th); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%v: %v, want %v", tc.path, got, tc.want)
		}
	}
	if got := s.CascadePathAccuracy([]string{"detect/yolov5m", "classify/effnet_b0"}, nil); math.Abs(got-0.454*0.771) > 1e-12 {
		t.Errorf("no cascade in force: %v, want the path's own", got)
	}
}

// TestCascadePathLevels: where the cascade has levels measured on one path's items, a leaf through that path is
// worth those levels' path accuracies (kept, and sent on), at the level nearest the threshold; a path without them
// is scaled from the task's levels; path levels out of order are refused.
func TestCascadePathLevels(t *testing.T) {
	base := string(cascadeExample(t))
	old := "      thresholds: [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]\n"
	withPaths := strings.Replace(base, old, old+`      paths:
        - path: [detect/yolov5m]
          levels:
            - {threshold: 0.4, escalation: 0.2, accuracy: 0.61, next_accuracy: 0.33}
            - {threshold: 0.6, escalation: 0.4, accuracy: 0.66, next_accuracy: 0.38}
`, 1)
	s, err := Parse([]byte(withPaths))
	if err != nil {
		t.Fatal(err)
	}
	th := map[string]float64{"classify": 0.55}
	l := s.Task("classify").Cascade.Level(0.55)
	for _, tc := range []struct {
		path []string
		want float64
	}{
		{[]string{"detect/yolov5m", "classify/effnet_b0"}, 0.66},
		{[]string{"detect/yolov5m", "classify/effnet_b0", "classify/effnet_b7"}, 0.38},
		{[]string{"detect/yolov5s", "classify/effnet_b0"}, s.PathAccuracyOf([]string{"detect/yolov5s", "classify/effnet_b0"}) * l.Accuracy / 0.771},
		{[]string{"detect/yolov5m", "classify/effnet_b7"}, 0.454 * 0.843},
	} {
		if got := s.CascadePathAccuracy(tc.path, th); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%v: %v, want %v", tc.path, got, tc.want)
		}
	}
	unsorted := strings.Replace(withPaths, "threshold: 0.6, escalation: 0.4", "threshold: 0.2, escalation: 0.4", 1)
	if _, err := Parse([]byte(unsorted)); err == nil || !strings.Contains(err.Error(), "paths[0].levels") {
		t.Errorf("path levels out of order: %v, want an error naming them", err)
	}
}
