package plan

import (
	"fmt"
	"testing"
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
			c[a.Pipeline+":"+a.Hop()]++
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
			next, unplaced := Assign(tc.plans, workers(tc.workers), nil)
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
	first, _ := Assign([]*Plan{p1}, workers(6), nil)

	p2 := testPlan("p", map[string]int{"a/x": 2, "a/y": 1, "b/z": 2})
	second, _ := Assign([]*Plan{p2}, workers(6), first)
	if n := changed(first, second); n != 1 {
		t.Errorf("plan change moved %d workers, want 1", n)
	}

	// w00 leaves: exactly one idle worker takes its replica.
	third, _ := Assign([]*Plan{p2}, workers(6)[1:], second)
	moved := 0
	for w, a := range third {
		if second[w].Hop() != a.Hop() {
			moved++
			if !second[w].Idle() {
				t.Errorf("busy worker %s was moved from %s to %s", w, second[w].Hop(), a.Hop())
			}
		}
	}
	if moved != 1 {
		t.Errorf("%d workers moved to replace a lost one, want 1", moved)
	}
}

func changed(a, b map[string]Assignment) int {
	n := 0
	for w := range b {
		if a[w].Hop() != b[w].Hop() {
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
