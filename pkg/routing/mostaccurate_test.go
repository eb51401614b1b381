package routing

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// treeYAML: a -> {b, c}; a's variants emit 3 (x) and 1 (y) sub-requests, 80% to b.
const treeYAML = `
name: r
slo_ms: 1000
tasks:
  - name: a
    children: [b, c]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 3, shares: {b: 0.8, c: 0.2}}, profile: [{batch: 1, p50_ms: 10, p95_ms: 10}]}
      - {name: y, accuracy: 0.8, executor: {kind: emulated}, fanout: {mean: 1, shares: {b: 0.8, c: 0.2}}, profile: [{batch: 1, p50_ms: 5, p95_ms: 5}]}
  - name: b
    variants:
      - {name: p, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 8, p95_ms: 8}]}
      - {name: q, accuracy: 0.7, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 2, p95_ms: 2}]}
  - name: c
    variants:
      - {name: s, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 8, p95_ms: 8}]}
`

// hosting builds a plan from "task/variant=capacity" entries.
func hosting(entries ...string) *plan.Plan {
	p := &plan.Plan{Pipeline: "r"}
	for _, e := range entries {
		hop, capStr, _ := strings.Cut(e, "=")
		task, variant, _ := strings.Cut(hop, "/")
		var capacity float64
		fmt.Sscanf(capStr, "%g", &capacity)
		p.Variants = append(p.Variants, plan.VariantPlan{Task: task, Variant: variant, Replicas: 1, MaxBatch: 1,
			CapacityQPS: capacity, BudgetMs: 1})
	}
	return p
}

func routes(rs []plan.Route) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s:%.3g", r.Variant, r.Prob))
	}
	return strings.Join(parts, " ")
}

func backups(bs []plan.Backup) string {
	var parts []string
	for _, b := range bs {
		parts = append(parts, fmt.Sprintf("%s:%.4g", b.Variant, b.LeftoverQPS))
	}
	return strings.Join(parts, " ")
}

func TestMostAccurateFirst(t *testing.T) {
	spec, err := pipeline.Parse([]byte(treeYAML))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		plan   *plan.Plan
		demand float64
		fanout map[string]pipeline.Fanout
		util   float64
		want   map[string]string // "root", "a/x>b", ..., "backup b"
	}{
		{
			name: "fits the most accurate", plan: hosting("a/x=100", "a/y=200", "b/p=1000", "c/s=1000"), demand: 50,
			want: map[string]string{"root": "x:1", "backup a": "x:50 y:200"},
		},
		{
			name: "fills in order of accuracy", plan: hosting("a/x=100", "a/y=200", "b/p=1000", "c/s=1000"), demand: 150,
			want: map[string]string{"root": "x:0.667 y:0.333", "backup a": "y:150"},
		},
		{
			// At 80% utilisation x takes 80 of the 150, y the rest; y's backup room is 160 - 70.
			name: "filled to a utilisation below 1", plan: hosting("a/x=100", "a/y=200", "b/p=1000", "c/s=1000"), demand: 150,
			util: 0.8, want: map[string]string{"root": "x:0.533 y:0.467", "backup a": "y:90"},
		},
		{
			name: "overload spreads the excess by capacity", plan: hosting("a/x=100", "a/y=200", "b/p=1000", "c/s=1000"), demand: 600,
			want: map[string]string{"root": "x:0.333 y:0.667", "backup a": ""},
		},
		{
			// x gets 50 and emits 150 (120 to b, 30 to c); y gets 50 and emits 50 (40 to b, 10 to c).
			// b: x's 120 fill p (cap 130) first; y's 40 get p's last 10, then q.
			name: "multiplicative factors and shares", plan: hosting("a/x=50", "a/y=100", "b/p=130", "b/q=100", "c/s=1000"), demand: 100,
			want: map[string]string{
				"root": "x:0.5 y:0.5", "a/x>b": "p:1", "a/y>b": "p:0.25 q:0.75", "a/x>c": "s:1", "a/y>c": "s:1",
				"backup b": "q:70", "backup c": "s:960", "backup a": "y:50",
			},
		},
		{
			// Workers observe x emitting 1 sub-request, not 3: b needs far less.
			name: "observed factors override the profile", plan: hosting("a/x=50", "a/y=100", "b/p=130", "b/q=100", "c/s=1000"), demand: 100,
			fanout: map[string]pipeline.Fanout{"a/x": {Mean: 1, Shares: map[string]float64{"b": 0.8, "c": 0.2}}},
			want:   map[string]string{"a/x>b": "p:1", "a/y>b": "p:1", "backup b": "p:50 q:100"},
		},
		{
			// y gets no traffic in the estimate, yet needs a table: the most accurate child with room.
			name: "a variant with no estimated traffic", plan: hosting("a/x=100", "a/y=100", "b/p=1000", "b/q=100", "c/s=1000"), demand: 10,
			want: map[string]string{"root": "x:1", "a/y>b": "p:1", "a/y>c": "s:1"},
		},
		{
			// The plan retired y, but a batch of y started under the previous plan still needs somewhere to send
			// its sub-requests.
			name: "a variant the plan does not host", plan: hosting("a/x=100", "b/p=1000", "b/q=100", "c/s=1000"), demand: 50,
			want: map[string]string{"root": "x:1", "a/y>b": "p:1", "a/y>c": "s:1"},
		},
		{
			name: "no traffic and no room: by capacity", plan: hosting("a/x=100", "a/y=100", "b/p=24", "b/q=72", "c/s=1000"), demand: 40,
			want: map[string]string{"a/x>b": "p:0.25 q:0.75", "a/y>b": "p:0.25 q:0.75", "backup b": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := MostAccurateFirst(Input{Spec: spec, Plan: tc.plan, Demand: tc.demand, Fanout: tc.fanout,
				Utilization: tc.util})
			got := map[string]string{"root": routes(r.Root)}
			for hop, tables := range r.Downstream {
				for child, rs := range tables {
					got[hop+">"+child] = routes(rs)
				}
			}
			for _, task := range []string{"a", "b", "c"} {
				got["backup "+task] = backups(r.Backup[task])
			}
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("%s: %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

// TestTablesSumToOne routes random demands over random hostings of the traffic example: every table is a
// probability distribution over hosted variants, and no backup has negative room.
func TestTablesSumToOne(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		p := &plan.Plan{Pipeline: spec.Name}
		for _, task := range spec.Tasks {
			for _, v := range task.Variants {
				if rng.IntN(3) == 0 || v.Name == task.MostAccurate().Name {
					b := spec.BatchSizes[rng.IntN(len(spec.BatchSizes))]
					p.Variants = append(p.Variants, plan.NewVariantPlan(task.Name, spec.Variant(task.Name, v.Name), 1+rng.IntN(4), b))
				}
			}
		}
		r := MostAccurateFirst(Input{Spec: spec, Plan: p, Demand: rng.Float64() * 2000})
		check := func(where string, rs []plan.Route) {
			sum := 0.0
			for _, x := range rs {
				if p.Find(taskOf(spec, where), x.Variant) == nil || x.Prob < 0 {
					t.Fatalf("trial %d %s: route %+v to a variant not hosted", trial, where, x)
				}
				sum += x.Prob
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("trial %d %s: probabilities sum to %v: %v", trial, where, sum, rs)
			}
		}
		check("root", r.Root)
		for hop, tables := range r.Downstream {
			for child, rs := range tables {
				check(hop+">"+child, rs)
			}
		}
		for task, bs := range r.Backup {
			for _, b := range bs {
				if b.LeftoverQPS <= 0 || p.Find(task, b.Variant) == nil {
					t.Fatalf("trial %d: backup %+v of %s", trial, b, task)
				}
			}
		}
	}
}

// taskOf names the task a table routes to: "root" is the root task, "x/y>child" is child.
func taskOf(spec *pipeline.Spec, where string) string {
	if where == "root" {
		return spec.Root().Name
	}
	_, child, _ := strings.Cut(where, ">")
	return child
}

// BenchmarkMostAccurateFirst routes the 3-task example tree over a 20-worker plan that hosts several variants of
// each task (the size of plan accuracy scaling produces). Target: 20 us or less.
func BenchmarkMostAccurateFirst(b *testing.B) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	p := &plan.Plan{Pipeline: spec.Name}
	add := func(task, variant string, replicas, batch int) {
		p.Variants = append(p.Variants, plan.NewVariantPlan(task, spec.Variant(task, variant), replicas, batch))
	}
	add("detect", "yolov5x", 3, 8)
	add("detect", "yolov5l", 2, 8)
	add("detect", "yolov5m", 2, 8)
	add("detect", "yolov5s", 2, 8)
	add("classify_car", "effnet_b7", 2, 8)
	add("classify_car", "effnet_b5", 2, 16)
	add("classify_car", "effnet_b3", 2, 16)
	add("classify_car", "effnet_b1", 1, 16)
	add("recognize_face", "arcface_r100", 1, 16)
	add("recognize_face", "arcface_r50", 1, 16)
	add("recognize_face", "arcface_r18", 2, 16)
	if p.Servers() != 20 {
		b.Fatalf("plan has %d workers", p.Servers())
	}
	in := Input{Spec: spec, Plan: p, Demand: 600}
	var r plan.Routing
	for b.Loop() {
		r = MostAccurateFirst(in)
	}
	hops := make([]string, 0, len(r.Downstream))
	for h := range r.Downstream {
		hops = append(hops, h)
	}
	sort.Strings(hops)
	if len(hops) != 5 { // every variant of detect, hosted or not
		b.Fatalf("tables for %v", hops)
	}
}

// TestFactorWithoutShares: a measured factor of a task with one child may leave out its shares (pipeline.Fanout):
// it then sends all of its sub-requests to that child, as the allocation reads it, not none.
func TestFactorWithoutShares(t *testing.T) {
	spec, err := pipeline.Parse([]byte(`
name: r
slo_ms: 1000
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1}, profile: [{batch: 1, p50_ms: 10, p95_ms: 10}]}
  - name: b
    variants:
      - {name: p, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 8, p95_ms: 8}]}
      - {name: q, accuracy: 0.7, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 2, p95_ms: 2}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := hosting("a/x=100", "b/p=50", "b/q=500")
	// 10 QPS times 10 sub-requests each: 100 for b, beyond p's 50.
	route := func(f pipeline.Fanout) string {
		r := MostAccurateFirst(Input{Spec: spec, Plan: p, Demand: 10, Utilization: 1,
			Fanout: map[string]pipeline.Fanout{"a/x": f}})
		return routes(r.Downstream["a/x"]["b"])
	}
	with, without := route(pipeline.Fanout{Mean: 10, Shares: map[string]float64{"b": 1}}), route(pipeline.Fanout{Mean: 10})
	if with != without || with != "p:0.5 q:0.5" {
		t.Errorf("a/x's table for b: %q with its share, %q without; want both p:0.5 q:0.5", with, without)
	}
}
