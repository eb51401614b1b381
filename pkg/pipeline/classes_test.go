package pipeline

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestClassProfilesExpand(t *testing.T) {
	s, err := Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Classes(), ","); got != "cpu,fast" {
		t.Fatalf("classes %s, want cpu,fast", got)
	}
	d := s.Task("detect")
	if len(d.Variants) != 10 {
		t.Fatalf("detect has %d variants, want 10 (5 models x 2 classes)", len(d.Variants))
	}
	fast := s.Variant("detect", "yolov5x@fast")
	cpu := s.Variant("detect", "yolov5x@cpu")
	if fast == nil || cpu == nil || s.Variant("detect", "yolov5x") != nil {
		t.Fatalf("yolov5x's deployments: fast %v, cpu %v", fast, cpu)
	}
	if fast.Class() != "fast" || fast.Model() != "yolov5x" || fast.Accuracy != cpu.Accuracy ||
		fast.Throughput(8) < 5*cpu.Throughput(8) {
		t.Errorf("yolov5x@fast: class %s, model %s, accuracy %v, %.0f QPS at 8 against cpu's %.0f", fast.Class(),
			fast.Model(), fast.Accuracy, fast.Throughput(8), cpu.Throughput(8))
	}
	// A path's accuracy is its models', whatever the classes.
	a := s.PathAccuracyOf([]string{"detect/yolov5x@fast", "classify_car/effnet_b7@cpu"})
	if b := s.PathAccuracyOf([]string{"detect/yolov5x@cpu", "classify_car/effnet_b7@fast"}); a != b || a == 0 {
		t.Errorf("path accuracies %v and %v", a, b)
	}
	// The expanded spec is what the planner stores: it parses back to itself.
	js, _ := json.Marshal(s)
	again, err := ParseJSON(js)
	if err != nil {
		t.Fatal(err)
	}
	js2, _ := json.Marshal(again)
	if string(js) != string(js2) {
		t.Error("the expanded spec does not parse back to itself")
	}
}

func TestClassProfilesErrors(t *testing.T) {
	base := `name: p
slo_ms: 100
batch_sizes: [1, 2]
tasks:
  - name: t
    variants:
      - name: v
        accuracy: 0.5
        executor: {kind: emulated}
`
	for name, c := range map[string]struct{ variant, want string }{
		"no profile":    {"", "missing property 'profile'"},
		"default class": {"        class_profiles: {default: [{batch: 1, p50_ms: 1, p95_ms: 1}, {batch: 2, p50_ms: 2, p95_ms: 2}]}\n", `class "default"`},
		"bad batches":   {"        class_profiles: {fast: [{batch: 1, p50_ms: 1, p95_ms: 1}]}\n", "class_profiles.fast: batch size 2 missing"},
		"classed name":  {"        class_profiles: {fast: [{batch: 1, p50_ms: 1, p95_ms: 1}, {batch: 2, p50_ms: 2, p95_ms: 2}]}\n", ""},
	} {
		src := base + c.variant
		if name == "classed name" {
			src = strings.Replace(src, "name: v", "name: v@fast", 1)
			c.want = "its classes are class_profiles' keys"
		}
		_, err := Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, c.want)
		}
	}
	// Both: the default class and another.
	ok := base + "        profile: [{batch: 1, p50_ms: 1, p95_ms: 1}, {batch: 2, p50_ms: 2, p95_ms: 2}]\n" +
		"        class_profiles: {fast: [{batch: 1, p50_ms: 0.5, p95_ms: 1}, {batch: 2, p50_ms: 1, p95_ms: 2}]}\n"
	s, err := Parse([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Classes(), ","); got != "default,fast" || s.Variant("t", "v@fast").Profile[1].P50Ms != 1 {
		t.Errorf("classes %s", got)
	}
}
