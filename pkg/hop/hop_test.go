package hop

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// A detector whose sub-requests go to cars (two hosted variants, 4 and 1 replicas at max batch 8) and faces (one
// variant, 2 replicas at max batch 4).
const specYAML = `
name: hop
slo_ms: 1000
batch_sizes: [1, 2, 4, 6, 8]
tasks:
  - name: det
    children: [car, face]
    variants:
      - name: d
        accuracy: 0.9
        executor: {kind: emulated}
        fanout: {mean: 10, shares: {car: 0.7, face: 0.3}}
        profile:
          - {batch: 1, p50_ms: 10, p95_ms: 10}
          - {batch: 2, p50_ms: 10, p95_ms: 10}
          - {batch: 4, p50_ms: 10, p95_ms: 10}
          - {batch: 6, p50_ms: 10, p95_ms: 10}
          - {batch: 8, p50_ms: 10, p95_ms: 10}
  - name: car
    variants:
      - name: c1
        accuracy: 0.9
        executor: {kind: emulated}
        profile:
          - {batch: 1, p50_ms: 4, p95_ms: 4}
          - {batch: 2, p50_ms: 5, p95_ms: 5}
          - {batch: 4, p50_ms: 7, p95_ms: 7}
          - {batch: 6, p50_ms: 9, p95_ms: 9}
          - {batch: 8, p50_ms: 11, p95_ms: 11}
      - name: c2
        accuracy: 0.8
        executor: {kind: emulated}
        profile:
          - {batch: 1, p50_ms: 2, p95_ms: 2}
          - {batch: 2, p50_ms: 3, p95_ms: 3}
          - {batch: 4, p50_ms: 4, p95_ms: 4}
          - {batch: 6, p50_ms: 6, p95_ms: 6}
          - {batch: 8, p50_ms: 6, p95_ms: 6}
  - name: face
    variants:
      - name: f1
        accuracy: 0.9
        executor: {kind: emulated}
        profile:
          - {batch: 1, p50_ms: 3, p95_ms: 3}
          - {batch: 2, p50_ms: 4, p95_ms: 4}
          - {batch: 4, p50_ms: 6, p95_ms: 6}
          - {batch: 6, p50_ms: 8, p95_ms: 8}
          - {batch: 8, p50_ms: 10, p95_ms: 10}
allocation:
  - {task: det, variant: d, replicas: 1, max_batch: 1}
  - {task: car, variant: c1, replicas: 4, max_batch: 8}
  - {task: car, variant: c2, replicas: 1, max_batch: 8}
  - {task: face, variant: f1, replicas: 2, max_batch: 4}
`

// table is det/d's forwarding under the spec's allocation, cars split between c1 and c2 with probability pC1, faces
// routed to f1 unless facesUnrouted.
func table(t *testing.T, pC1 float64, facesUnrouted bool) (*Table, *pipeline.Spec) {
	t.Helper()
	spec, err := pipeline.Parse([]byte(specYAML))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	down := map[string][]plan.Route{"car": {{Variant: "c1", Prob: pC1}, {Variant: "c2", Prob: 1 - pC1}}}
	if !facesUnrouted {
		down["face"] = []plan.Route{{Variant: "f1", Prob: 1}}
	}
	p.Routing = plan.Routing{Root: []plan.Route{{Variant: "d", Prob: 1}},
		Downstream: map[string]map[string][]plan.Route{"det/d": down}}
	stage := deadline.NewStage(spec, p, deadline.None, "det", "d", 10*time.Millisecond, 1)
	return NewTable(spec, p, stage, "det", "d", spec.Task("det").Children), spec
}

func children(cars, faces int) []int {
	var c []int
	for range cars {
		c = append(c, 0)
	}
	for range faces {
		c = append(c, 1)
	}
	return c
}

var when = When{Now: time.Unix(100, 0).UnixNano(), AtTask: 5 * time.Millisecond, Left: time.Second}

func TestSplit(t *testing.T) {
	spec, err := pipeline.Parse([]byte(specYAML))
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := spec.Variant("car", "c1"), spec.Variant("car", "c2")
	for _, tc := range []struct {
		name               string
		n, replicas, batch int
		variant            *pipeline.Variant
		want               []int
	}{
		{"one item", 1, 4, 8, c1, []int{1}},
		{"under the batch: no split though 4 replicas are free", 5, 4, 8, c1, []int{5}},
		{"exactly the batch", 8, 4, 8, c1, []int{8}},
		{"over the batch, one replica: the model batches one message ran", 18, 1, 8, c1, []int{8, 8, 2}},
		{"24 on 3 replicas", 24, 3, 8, c1, []int{8, 8, 8}},
		{"24 on 4 replicas: finer, since 6 runs faster than 8", 24, 4, 8, c1, []int{6, 6, 6, 6}},
		{"24 on 4 replicas of a profile where 6 costs as much as 8", 24, 4, 8, c2, []int{8, 8, 8}},
		{"18 on 4 replicas: 5 (at 6's latency, the next profiled size) runs faster than 8", 18, 4, 8, c1,
			[]int{5, 5, 4, 4}},
		{"18 on 4 replicas where 5 costs as much as 8", 18, 4, 8, c2, []int{8, 8, 2}},
		{"24 on 10 replicas: no message under half a batch", 24, 10, 8, c1, []int{4, 4, 4, 4, 4, 4}},
		{"many items: the batch bounds a message", 100, 4, 8, c1, []int{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4}},
		{"max batch 1: one message per item", 5, 2, 1, c1, []int{1, 1, 1, 1, 1}},
		{"a destination the plan does not host", 30, 0, 0, nil, []int{30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(nil, tc.n, Dest{Replicas: tc.replicas, MaxBatch: tc.batch, Variant: tc.variant})
			if !slices.Equal(got, tc.want) {
				t.Errorf("Split(%d, %d replicas, max batch %d) = %v, want %v", tc.n, tc.replicas, tc.batch, got,
					tc.want)
			}
		})
	}
}

// TestStep: every sub-request is sent once or dropped once, messages go to the routed destination and hold at most
// its max batch, and the weights of the parent's sub-requests sum exactly to the
// parent's.
func TestStep(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pC1           float64
		facesUnrouted bool
		den           uint64
		cars, faces   int
		wantMessages  int // -1: not checked (random split between c1 and c2)
		wantDrops     int
	}{
		{"one car", 1, false, 1, 1, 0, 1, 0},
		{"a small fan-out: one message per destination", 1, false, 3, 5, 3, 2, 0},
		{"cars over the batch: spread over c1's 4 replicas", 1, false, 1, 24, 0, 4, 0},
		{"cars and faces over their batches", 1, false, 7, 18, 9, 4 + 3, 0},
		{"cars split between two variants", 0.5, false, 2, 30, 4, -1, 0},
		{"faces routed nowhere: dropped leaves", 1, true, 1, 3, 4, 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, _ := table(t, tc.pC1, tc.facesUnrouted)
			var st Stepper
			kids := children(tc.cars, tc.faces)
			out, err := st.Step(tb, Item{Den: tc.den, Children: kids}, when, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			k := len(kids)
			if out.Den != tc.den*uint64(k) {
				t.Errorf("sub-request den %d, want %d", out.Den, tc.den*uint64(k))
			}
			if tc.wantMessages >= 0 && len(out.Messages) != tc.wantMessages {
				t.Errorf("%d messages, want %d", len(out.Messages), tc.wantMessages)
			}
			if len(out.Drops) != tc.wantDrops {
				t.Errorf("%d drops, want %d", len(out.Drops), tc.wantDrops)
			}
			seen := make([]int, k)
			sum := new(big.Rat)
			sizes := map[string][]int{}
			for _, m := range out.Messages {
				dest := tb.Children[m.Child] + "/" + m.Variant
				sizes[dest] = append(sizes[dest], len(m.Subs))
				if !slices.IsSorted(m.Subs) {
					t.Errorf("message to %s carries %v: not in numbering order", dest, m.Subs)
				}
				for _, n := range m.Subs {
					seen[n]++
					if kids[n] != m.Child {
						t.Errorf("sub-request %d (child %d) sent to child %d", n, kids[n], m.Child)
					}
					sum.Add(sum, big.NewRat(1, int64(out.Den)))
				}
			}
			for _, d := range out.Drops {
				seen[d.Sub]++
				if d.Reason != wire.DropUnrouted {
					t.Errorf("drop reason %q, want %q", d.Reason, wire.DropUnrouted)
				}
				sum.Add(sum, big.NewRat(1, int64(out.Den)))
			}
			for n, c := range seen {
				if c != 1 {
					t.Errorf("sub-request %d sent or dropped %d times, want once", n, c)
				}
			}
			if want := big.NewRat(1, int64(tc.den)); sum.Cmp(want) != 0 {
				t.Errorf("the sub-requests' weights sum to %v, want the parent's %v", sum, want)
			}
			for dest, s := range sizes {
				batch := map[string]int{"car/c1": 8, "car/c2": 8, "face/f1": 4}[dest]
				if slices.Max(s) > batch {
					t.Errorf("messages to %s of sizes %v: want at most %d each", dest, s, batch)
				}
				for _, m := range out.Messages {
					if tb.Children[m.Child]+"/"+m.Variant == dest && m.Parts != len(s) {
						t.Errorf("a message to %s says %d parts, want %d", dest, m.Parts, len(s))
					}
				}
			}
		})
	}
}

// TestStepNoGrowthForSmallFanouts: a parent whose sub-requests for a destination fit its max batch sends one
// message there, however many replicas are free.
func TestStepNoGrowthForSmallFanouts(t *testing.T) {
	tb, _ := table(t, 1, false)
	var st Stepper
	for cars := 1; cars <= 8; cars++ {
		for faces := 0; faces <= 4; faces++ {
			out, err := st.Step(tb, Item{Den: 1, Children: children(cars, faces)}, when, rand.New(rand.NewPCG(3, 4)))
			if err != nil {
				t.Fatal(err)
			}
			want := 1
			if faces > 0 {
				want = 2
			}
			if len(out.Messages) != want {
				t.Errorf("%d cars, %d faces: %d messages, want %d (one per destination)", cars, faces,
					len(out.Messages), want)
			}
		}
	}
}

// TestStepIDs: the ids of a parent's messages are distinct, and a parent stepped again (a redelivered batch) with the
// same draws gets the same ones; a message carrying all of a destination's sub-requests keeps the unsplit id.
func TestStepIDs(t *testing.T) {
	tb, _ := table(t, 0.5, false)
	ids := func(seed uint64) []string {
		var st Stepper
		out, err := st.Step(tb, Item{Den: 1, Children: children(40, 9)}, when, rand.New(rand.NewPCG(seed, 9)))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range out.Messages {
			task := tb.Children[m.Child]
			id := wire.TaskMsgID("r1", "0", task, m.Variant)
			if m.Parts > 1 {
				id = wire.TaskPartMsgID("r1", "0", task, m.Variant, m.Subs)
			}
			ids = append(ids, id)
		}
		return ids
	}
	a, b := ids(5), ids(5)
	if !slices.Equal(a, b) {
		t.Errorf("the same parent stepped twice got ids\n%v\n%v", a, b)
	}
	if len(a) < 5 {
		t.Fatalf("only %d messages for 40 cars and 9 faces: the split did not happen", len(a))
	}
	if d := slices.Compact(slices.Sorted(slices.Values(a))); len(d) != len(a) {
		t.Errorf("ids not distinct: %v", a)
	}
}

func TestStepWeightOverflow(t *testing.T) {
	tb, _ := table(t, 1, false)
	var st Stepper
	_, err := st.Step(tb, Item{Den: math.MaxUint64/2 + 1, Children: children(3, 0)}, when, rand.New(rand.NewPCG(1, 1)))
	if !errors.Is(err, ErrWeightOverflow) {
		t.Fatalf("err %v, want %v", err, ErrWeightOverflow)
	}
}

// TestStepBeforeAPlan: without a plan nothing is routed; every sub-request is a dropped leaf.
func TestStepBeforeAPlan(t *testing.T) {
	spec, err := pipeline.Parse([]byte(specYAML))
	if err != nil {
		t.Fatal(err)
	}
	stage := deadline.NewStage(spec, nil, deadline.None, "det", "d", 10*time.Millisecond, 1)
	tb := NewTable(spec, nil, stage, "det", "d", spec.Task("det").Children)
	var st Stepper
	out, err := st.Step(tb, Item{Den: 1, Children: children(2, 1)}, when, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 || len(out.Drops) != 3 {
		t.Errorf("%d messages and %d drops, want 0 and 3", len(out.Messages), len(out.Drops))
	}
}
