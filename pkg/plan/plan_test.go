package plan

import (
	"cmp"
	"fmt"
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func testPlan(name string, replicas map[string]int) *Plan {
	p := &Plan{Pipeline: name, Epoch: 1}
	for _, hop := range []string{"a/x", "a/y", "b/z"} {
		if n := replicas[hop]; n > 0 {
			p.Variants = append(p.Variants, VariantPlan{Task: hop[:1], Variant: hop[2:], Replicas: n, MaxBatch: 4})
		}
	}
	return p
}

func workers(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("w%02d", i))
	}
	return out
}

func count(next map[string]Assignment) map[string]int {
	c := map[string]int{}
	for _, a := range next {
		if a.Idle() {
			c["idle"]++
		} else {
			c[a.Served().String()]++
		}
	}
	return c
}

func TestAssign(t *testing.T) {
	tests := []struct {
		name     string
		plans    []*Plan
		workers  int
		want     map[string]int
		unplaced int
	}{
		{"fills replicas, rest idle", []*Plan{testPlan("p", map[string]int{"a/x": 2, "b/z": 1})}, 5,
			map[string]int{"p:a/x": 2, "p:b/z": 1, "idle": 2}, 0},
		{"too few workers", []*Plan{testPlan("p", map[string]int{"a/x": 2, "b/z": 3})}, 3,
			map[string]int{"p:a/x": 2, "p:b/z": 1}, 2},
		{"two pipelines share the workers", []*Plan{testPlan("p", map[string]int{"a/x": 1}), testPlan("q", map[string]int{"a/y": 2})}, 4,
			map[string]int{"p:a/x": 1, "q:a/y": 2, "idle": 1}, 0},
		{"no workers", []*Plan{testPlan("p", map[string]int{"a/x": 1})}, 0, map[string]int{}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, unplaced := Assign(tc.plans, workers(tc.workers), nil, nil)
			if unplaced != tc.unplaced {
				t.Errorf("unplaced %d, want %d", unplaced, tc.unplaced)
			}
			got := count(next)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("assignments %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAssignKeepsWorkersInPlace checks the minimal-change rule: when the plan moves one replica from a/x to a/y, only
// one worker changes variant, and a worker that leaves is replaced by an idle one without moving anyone else.
func TestAssignKeepsWorkersInPlace(t *testing.T) {
	p1 := testPlan("p", map[string]int{"a/x": 3, "b/z": 2})
	first, _ := Assign([]*Plan{p1}, workers(6), nil, nil)

	p2 := testPlan("p", map[string]int{"a/x": 2, "a/y": 1, "b/z": 2})
	second, _ := Assign([]*Plan{p2}, workers(6), nil, first)
	if n := changed(first, second); n != 1 {
		t.Errorf("plan change moved %d workers, want 1", n)
	}

	// w00 leaves: exactly one idle worker takes its replica.
	third, _ := Assign([]*Plan{p2}, workers(6)[1:], nil, second)
	moved := 0
	for w, a := range third {
		if second[w].Key() != a.Key() {
			moved++
			if !second[w].Idle() {
				t.Errorf("busy worker %s was moved from %s to %s", w, second[w].Key(), a.Key())
			}
		}
	}
	if moved != 1 {
		t.Errorf("%d workers moved to replace a lost one, want 1", moved)
	}
}

// TestAssignByClass: a replica of "model@class" goes only to a worker of that class, a default-class variant only to
// a worker that declares no class; a worker keeps its replica only while its class matches; replicas of a class
// without workers left are unplaced rather than put on another class.
func TestAssignByClass(t *testing.T) {
	p := &Plan{Pipeline: "p", Epoch: 1, Variants: []VariantPlan{
		{Task: "a", Variant: "x@fast", Replicas: 2, MaxBatch: 4},
		{Task: "a", Variant: "x@cpu", Replicas: 1, MaxBatch: 4},
		{Task: "b", Variant: "z", Replicas: 1, MaxBatch: 4},
	}}
	names := []string{"c1", "c2", "d1", "f1", "f2", "f3"}
	classes := map[string]string{"c1": "cpu", "c2": "cpu", "f1": "fast", "f2": "fast", "f3": "fast"}
	next, unplaced := Assign([]*Plan{p}, names, classes, nil)
	if unplaced != 0 {
		t.Fatalf("unplaced %d, want 0", unplaced)
	}
	for w, a := range next {
		if !a.Idle() && wire.ClassOf(a.Variant) != cmp.Or(classes[w], wire.DefaultClass) {
			t.Errorf("worker %s of class %q hosts %s", w, classes[w], a.Variant)
		}
	}
	if got := count(next); fmt.Sprint(got) != fmt.Sprint(map[string]int{"idle": 2, "p:a/x@cpu": 1, "p:a/x@fast": 2, "p:b/z": 1}) {
		t.Errorf("assignments %v", got)
	}
	// The fast workers leave: their replicas find no worker of their class, and no cpu worker moves.
	again, unplaced := Assign([]*Plan{p}, []string{"c1", "c2", "d1"}, classes, next)
	if unplaced != 2 {
		t.Errorf("unplaced %d without fast workers, want 2", unplaced)
	}
	for _, w := range []string{"c1", "c2", "d1"} {
		if again[w] != next[w] {
			t.Errorf("worker %s moved from %+v to %+v", w, next[w], again[w])
		}
	}
	// A worker whose class no longer matches its variant (it came back as another class) is reassigned.
	classes2 := map[string]string{"c1": "cpu", "c2": "fast", "f1": "fast", "f2": "fast", "f3": "fast"}
	third, _ := Assign([]*Plan{p}, names, classes2, next)
	for w, a := range third {
		if !a.Idle() && wire.ClassOf(a.Variant) != cmp.Or(classes2[w], wire.DefaultClass) {
			t.Errorf("worker %s of class %q hosts %s", w, classes2[w], a.Variant)
		}
	}
}

func changed(a, b map[string]Assignment) int {
	n := 0
	for w := range b {
		if a[w].Key() != b[w].Key() {
			n++
		}
	}
	return n
}

func TestPick(t *testing.T) {
	routes := []Route{{"x", 0.25}, {"y", 0.75}}
	for _, tc := range []struct {
		u    float64
		want string
	}{{0, "x"}, {0.2499, "x"}, {0.25, "y"}, {0.9999, "y"}} {
		if got := Pick(routes, tc.u); got != tc.want {
			t.Errorf("Pick(%v) = %q, want %q", tc.u, got, tc.want)
		}
	}
	if Pick(nil, 0.5) != "" {
		t.Error("Pick on no routes should be empty")
	}
}

func TestRehome(t *testing.T) {
	p := &Plan{
		Variants: []VariantPlan{{Task: "detect", Variant: "small", Replicas: 2}, {Task: "classify", Variant: "b0", Replicas: 1},
			{Task: "classify", Variant: "b1", Replicas: 0}},
		Routing: Routing{
			Root: []Route{{"small", 1}},
			Downstream: map[string]map[string][]Route{
				"detect/large": {"classify": {{"b0", 1}}},
				"detect/small": {"classify": {{"b0", 0.5}, {"b1", 0.5}}},
			},
		},
	}
	for _, tc := range []struct {
		name                    string
		task, variant, upstream string
		u                       float64
		want                    string
	}{
		{"hosted: stays", "classify", "b0", "detect/small", 0.1, ""},
		{"root task: the root table", "detect", "large", "", 0.7, "small"},
		{"after a retired upstream: its table", "classify", "b7", "detect/large", 0.9, "b0"},
		{"no replicas: moved, drawn by u", "classify", "b1", "detect/small", 0.2, "b0"},
		{"no replicas, drawn back to itself: stays", "classify", "b1", "detect/small", 0.7, ""},
		{"no table from upstream: stays", "classify", "b7", "detect/medium", 0.5, ""},
	} {
		if got := p.Rehome(tc.task, tc.variant, tc.upstream, tc.u); got != tc.want {
			t.Errorf("%s: Rehome(%s/%s after %q) = %q, want %q", tc.name, tc.task, tc.variant, tc.upstream, got, tc.want)
		}
	}
}

func TestBudgetScale(t *testing.T) {
	// A tree: a -> {b, c}. Chains a-b and a-c.
	spec := &pipeline.Spec{SLOMs: 400, CommLatencyMs: 10, Tasks: []pipeline.Task{
		{Name: "a", Children: []string{"b", "c"}}, {Name: "b"}, {Name: "c"},
	}}
	vp := func(task, variant string, budget float64) VariantPlan {
		return VariantPlan{Task: task, Variant: variant, Replicas: 1, BudgetMs: budget}
	}
	tests := []struct {
		name string
		vars []VariantPlan
		want float64
	}{
		// a-b: (400-20)/(50+40) = 4.22; a-c: (400-20)/(50+140) = 2: the tighter chain sets the scale.
		{"tightest chain", []VariantPlan{vp("a", "x", 50), vp("b", "y", 40), vp("c", "z", 140)}, 2},
		// The slowest hosted variant of a task counts: a at 90 makes a-c (380)/(90+100) = 2.
		{"slowest hosted variant", []VariantPlan{vp("a", "x", 50), vp("a", "w", 90), vp("b", "y", 10), vp("c", "z", 100)}, 2},
		{"never below 1", []VariantPlan{vp("a", "x", 300), vp("b", "y", 100), vp("c", "z", 100)}, 1},
		{"no budgets", nil, 1},
	}
	for _, tc := range tests {
		p := &Plan{Variants: tc.vars}
		if got := p.BudgetScale(spec); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
