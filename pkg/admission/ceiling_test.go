package admission

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestCeilingBoundsAColdStart: a cold start at sixteen times what the pipeline answers, whose first answers come
// only 300 ms into the load (its first batch, as live). With the plan's ceiling at what it answers, requests are
// refused from the first tenth of a second, before any answer, and under a third as many of the admitted are late
// as without it (when only the first answers show the overload); a load it serves is refused nothing.
func TestCeilingBoundsAColdStart(t *testing.T) {
	late := map[float64]int{}
	for _, ceiling := range []float64{100, 0} {
		g := New(Config{})
		q := &fifo{rate: 100, floor: 300 * time.Millisecond, deadline: 600 * time.Millisecond, ceiling: ceiling}
		d := run(g, q, 1600, []int{0}, t0, t0.Add(5*time.Second), t0, nil)
		t.Logf("ceiling %g: %d refused, %d in time, %d late or dropped, first refusal at %v", ceiling, d.refused[0],
			q.inTime, q.late, d.firstRefusal)
		late[ceiling] = q.late
		if ceiling > 0 && (d.firstRefusal == 0 || d.firstRefusal > 100*time.Millisecond) {
			t.Errorf("first refusal at %v, want within 100 ms of the load, before the first answer at 300 ms",
				d.firstRefusal)
		}
	}
	if late[100]*3 > late[0] {
		t.Errorf("%d late or dropped with the ceiling, %d without: want under a third", late[100], late[0])
	}
	g := New(Config{})
	q := &fifo{rate: 100, floor: 50 * time.Millisecond, deadline: 600 * time.Millisecond, ceiling: 100}
	if d := run(g, q, 90, []int{0}, t0, t0.Add(10*time.Second), t0, nil); d.refused[0] > 0 || q.late > 0 {
		t.Errorf("90 QPS under a ceiling of 100: %d refused, %d late, want none", d.refused[0], q.late)
	}
}

// TestCeilingCountsTheFill: a cold start at sixteen times what the pipeline answers, where every request spends
// 300 ms after the bottleneck (the batches of the tasks after it) and only the first requests are in it. Told the
// fill, the ceiling admits what the bottleneck clears by each deadline less the fill, and under half as many of the
// admitted are late as with the ceiling alone; once the pipeline answers, it admits the rest of what is in time (a
// load it serves is refused nothing).
func TestCeilingCountsTheFill(t *testing.T) {
	late := map[bool]int{}
	for _, known := range []bool{true, false} {
		g := New(Config{})
		q := &fifo{rate: 100, fill: 300 * time.Millisecond, fillKnown: known, deadline: 600 * time.Millisecond,
			ceiling: 100}
		d := run(g, q, 1600, []int{0}, t0, t0.Add(5*time.Second), t0, nil)
		t.Logf("fill known %v: %d refused, %d in time, %d late or dropped", known, d.refused[0], q.inTime, q.late)
		late[known] = q.late
	}
	if late[true]*2 > late[false] {
		t.Errorf("%d late or dropped told the fill, %d not: want under half", late[true], late[false])
	}
	g := New(Config{})
	q := &fifo{rate: 100, fill: 300 * time.Millisecond, fillKnown: true, deadline: 600 * time.Millisecond,
		ceiling: 100}
	if d := run(g, q, 90, []int{0}, t0, t0.Add(10*time.Second), t0, nil); d.refused[0] > 0 || q.late > 0 {
		t.Errorf("90 QPS under a ceiling of 100 with a fill of 300 ms: %d refused, %d late, want none", d.refused[0],
			q.late)
	}
}

// TestOfCeiling: the traffic example's plan at its lowest demand (a replica of its most accurate variant per task)
// on 20 servers answers at most the 20 servers shared among the tasks as the items a request brings each (a car
// classification 2.1 times, a face 0.9 times a frame) at each replica's rate: about 249 a second.
func TestOfCeiling(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Allocation: &plan.Allocation{ClusterServers: 20, ActiveServers: 3, DemandQPS: 2},
		Variants: []plan.VariantPlan{
			{Task: "detect", Variant: "yolov5x", Replicas: 1, MaxBatch: 8, CapacityQPS: 36.086, BudgetMs: 190},
			{Task: "classify_car", Variant: "effnet_b7", Replicas: 1, MaxBatch: 8, CapacityQPS: 58.616, BudgetMs: 120},
			{Task: "recognize_face", Variant: "arcface_r100", Replicas: 1, MaxBatch: 4, CapacityQPS: 53.739,
				BudgetMs: 70}}}
	want := 20 / (1/36.086 + 2.1/58.616 + 0.9/53.739)
	if got := Of(spec, p, 0).CeilingQPS; !near(got, want, 0.01) {
		t.Errorf("ceiling %.2f QPS, want %.2f", got, want)
	}
	// A request's time through it at that rate: the slowest chain at the batch sizes of the rate, a hop each.
	if got := Of(spec, p, 0).CeilingFillMs; got != 190+1+120+1 {
		t.Errorf("fill %.1f ms, want %d (detect, then classify_car)", got, 190+1+120+1)
	}
	// Its share of a cluster of 40 (the plans of every pipeline were made for 40 servers): a tuner lends it the
	// workers no plan uses, so the ceiling counts all 40; never fewer than its own 20.
	if got := Of(spec, p, 40).CeilingQPS; !near(got, 2*want, 0.02) {
		t.Errorf("on 40 servers: ceiling %.2f QPS, want %.2f", got, 2*want)
	}
	if got := Of(spec, p, 10).CeilingQPS; !near(got, want, 0.01) {
		t.Errorf("told 10 servers, with 20 its own: ceiling %.2f QPS, want %.2f", got, want)
	}
	// Twice the replicas of the same variants: the same rate a replica, the same ceiling.
	for i := range p.Variants {
		p.Variants[i].Replicas *= 2
		p.Variants[i].CapacityQPS *= 2
	}
	if got := Of(spec, p, 0).CeilingQPS; !near(got, want, 0.01) {
		t.Errorf("with twice the replicas: ceiling %.2f QPS, want %.2f", got, want)
	}
	if got := Of(spec, &plan.Plan{Variants: p.Variants}, 20).CeilingQPS; got != 0 {
		t.Errorf("a plan without an allocation: ceiling %.2f, want none", got)
	}
}
