package control

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

func classesSpec(t *testing.T) *pipeline.Spec { return exampleSpec(t, "traffic-classes") }

// TestPlanningTraceRates: the mean is arrivals over the length; the peak the most arrivals in a window, per second.
func TestPlanningTraceRates(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tr := PlanningTrace{Arrivals: ms(0, 100, 900, 950, 990, 1000, 1500, 1999), Length: 2 * time.Second}
	if got := tr.MeanQPS(); got != 4 {
		t.Errorf("mean %v QPS, want 4", got)
	}
	// 900, 950, 990 and 1000 lie within 100 ms ([900, 1000) holds three: the window is half-open)
	if got := tr.PeakQPS(100 * time.Millisecond); got != 30 {
		t.Errorf("peak over 100 ms %v QPS, want 30", got)
	}
	if got := tr.PeakQPS(5 * time.Second); got != 4 {
		t.Errorf("peak over a window longer than the trace %v, want its mean", got)
	}
}

// TestUnitOn: the unit is each task's most accurate variant on the class, at the largest batch that crosses the
// pipeline within the SLO; the faster class takes larger batches and serves more.
func TestUnitOn(t *testing.T) {
	spec := classesSpec(t)
	cpu, ok := UnitOn(spec, "cpu")
	if !ok {
		t.Fatal("no unit on cpu")
	}
	fast, ok := UnitOn(spec, "fast")
	if !ok {
		t.Fatal("no unit on fast")
	}
	for i, task := range spec.Tasks {
		best := task.MostAccurate()
		for _, u := range []Unit{cpu, fast} {
			if v := u.Variants[i]; v.Model() != best.Model() || v.Class() != u.Class {
				t.Errorf("%s unit: task %s runs %s, want %s on %s", u.Class, task.Name, v.Name, best.Model(), u.Class)
			}
		}
	}
	for _, u := range []Unit{cpu, fast} {
		if u.LatencyMs > spec.SLOMs || u.CapacityQPS <= 0 {
			t.Errorf("%s unit: %+v", u.Class, u)
		}
		// the next batch size does not fit
		if i := indexOf(spec.BatchSizes, u.Batch); i+1 < len(spec.BatchSizes) {
			wider := *spec
			wider.BatchSizes = spec.BatchSizes[:i+2]
			if w, _ := UnitOn(&wider, u.Class); w.Batch != u.Batch {
				t.Errorf("%s unit: batch %d, but %d fits", u.Class, u.Batch, w.Batch)
			}
		}
	}
	if fast.Batch <= cpu.Batch || fast.CapacityQPS <= cpu.CapacityQPS {
		t.Errorf("fast unit %+v no larger than cpu's %+v", fast, cpu)
	}
	if _, ok := UnitOn(spec, "tpu"); ok {
		t.Error("a unit on a class no variant runs on")
	}
	tight := *spec
	tight.SLOMs = 1
	if _, ok := UnitOn(&tight, "cpu"); ok {
		t.Error("a unit within a 1 ms SLO")
	}
}

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// TestCoarseGrainedPlan: units enough for the rate, on the class that makes them cheapest, within its servers.
func TestCoarseGrainedPlan(t *testing.T) {
	spec := classesSpec(t)
	cpu, _ := UnitOn(spec, "cpu")
	fast, _ := UnitOn(spec, "fast")
	n := len(spec.Tasks)
	units := func(u Unit, qps float64) int { return int(math.Ceil(qps / u.CapacityQPS)) }
	for _, tc := range []struct {
		name    string
		cluster plan.Cluster
		qps     float64
	}{
		{"cheap cpu", plan.NewCluster(map[string]int{"cpu": 500, "fast": 100}, plan.Prices{"cpu": 0.4, "fast": 2.5}), 200},
		{"cheap fast", plan.NewCluster(map[string]int{"cpu": 500, "fast": 100}, plan.Prices{"cpu": 2, "fast": 2.5}), 200},
		{"cpu too small", plan.NewCluster(map[string]int{"cpu": 3, "fast": 100}, plan.Prices{"cpu": 0.4, "fast": 2.5}), 200},
	} {
		p, err := CoarseGrainedPlan(spec, tc.cluster, tc.qps)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cost := func(u Unit) float64 { return float64(units(u, tc.qps)*n) * tc.cluster.Price(u.Class) }
		want := cpu
		if cost(fast) < cost(cpu) || tc.cluster.Servers("cpu") < units(cpu, tc.qps)*n {
			want = fast
		}
		if p.Mode != plan.ModeHardware || len(p.Variants) != n {
			t.Fatalf("%s: %+v", tc.name, p)
		}
		for _, vp := range p.Variants {
			if vp.Class != want.Class || vp.Replicas != units(want, tc.qps) || vp.MaxBatch != want.Batch {
				t.Errorf("%s: %+v, want %d replicas on %s at batch %d", tc.name, vp, units(want, tc.qps), want.Class,
					want.Batch)
			}
		}
		if got := p.Allocation.CostPerHour; math.Abs(got-cost(want)) > 1e-9 {
			t.Errorf("%s: cost %v, want %v", tc.name, got, cost(want))
		}
	}
	// Past every class: as many units as the class serving most holds.
	small := plan.NewCluster(map[string]int{"cpu": 7, "fast": 3}, plan.Prices{"cpu": 0.4, "fast": 2.5})
	p, err := CoarseGrainedPlan(spec, small, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != plan.ModeAccuracy || p.Servers() > 7 || p.Variants[0].Class != "cpu" && p.Servers() > 3 {
		t.Errorf("past the cluster: %+v", p.Variants)
	}
	if _, err := CoarseGrainedPlan(spec, plan.NewCluster(map[string]int{"tpu": 10}, nil), 10); !errors.Is(err, ErrCannotServe) {
		t.Errorf("no class hosts it: %v", err)
	}
}

// TestCoarseGrainedPlansOnce: cg-mean and cg-peak plan on the trace's mean and peak, once: later calls keep the
// plan whatever the demand.
func TestCoarseGrainedPlansOnce(t *testing.T) {
	spec := classesSpec(t)
	var arr []time.Duration
	for i := range 1000 { // 100 QPS for 10 s, with a burst of 100 requests in 100 ms at 5 s
		arr = append(arr, time.Duration(i)*10*time.Millisecond)
	}
	for i := range 100 {
		arr = append(arr, 5*time.Second+time.Duration(i)*time.Millisecond)
	}
	slices.Sort(arr)
	tr := PlanningTrace{Arrivals: arr, Length: 10 * time.Second}
	cluster := plan.NewCluster(map[string]int{"cpu": 2000, "fast": 200}, plan.Prices{"cpu": 0.4, "fast": 2.5})
	for _, name := range []string{"cg-mean", "cg-peak"} {
		sys, err := ParseSystem(name, spec, Config{Traces: TraceSet{spec.Name: tr}})
		if err != nil {
			t.Fatal(err)
		}
		if sys.Name != name+":none" {
			t.Errorf("%s: named %s", name, sys.Name)
		}
		rate := tr.MeanQPS()
		if name == "cg-peak" {
			rate = tr.PeakQPS(time.Duration(spec.SLOMs) * time.Millisecond)
		}
		want, err := CoarseGrainedPlan(spec, cluster, rate)
		if err != nil {
			t.Fatal(err)
		}
		for _, demand := range []float64{10, 1000} {
			p, err := sys.Allocator.Allocate(spec, Observed{Demand: demand, Servers: cluster.Total(), Cluster: cluster})
			if err != nil {
				t.Fatal(err)
			}
			if p.Servers() != want.Servers() || p.Variants[0].Variant != want.Variants[0].Variant {
				t.Errorf("%s at %v QPS: %d servers of %s, want %d of %s", name, demand, p.Servers(),
					p.Variants[0].Variant, want.Servers(), want.Variants[0].Variant)
			}
		}
	}
	mean, _ := ParseSystem("cg-mean", spec, Config{Traces: TraceSet{spec.Name: tr}})
	peak, _ := ParseSystem("cg-peak", spec, Config{Traces: TraceSet{spec.Name: tr}})
	o := Observed{Demand: 1, Servers: cluster.Total(), Cluster: cluster}
	pm, _ := mean.Allocator.Allocate(spec, o)
	pp, _ := peak.Allocator.Allocate(spec, o)
	if pp.Allocation.CostPerHour <= pm.Allocation.CostPerHour {
		t.Errorf("cg-peak costs %v, no more than cg-mean's %v on a bursty trace", pp.Allocation.CostPerHour,
			pm.Allocation.CostPerHour)
	}
}

// TestMostAccurateOnlyKeepsClasses: InferLine keeps each task's most accurate model on every class it runs on, so
// that it chooses the hardware of each stage.
func TestMostAccurateOnlyKeepsClasses(t *testing.T) {
	spec := classesSpec(t)
	fixed := MostAccurateOnly(spec)
	for i, task := range fixed.Tasks {
		var classes []string
		for _, v := range task.Variants {
			if v.Model() != spec.Tasks[i].MostAccurate().Model() {
				t.Errorf("task %s keeps %s", task.Name, v.Name)
			}
			classes = append(classes, v.Class())
		}
		if !slices.Equal(classes, []string{"cpu", "fast"}) {
			t.Errorf("task %s keeps classes %v, want cpu and fast", task.Name, classes)
		}
	}
}
