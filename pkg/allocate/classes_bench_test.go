package allocate

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// classedSweeps are the examples on two server classes, priced, with the demands of their sweeps: the traffic
// example on classes (examples/traffic-classes.yaml) and the traffic camera with a fast class added (withFastClass).
func classedSweeps(tb testing.TB) []struct {
	name    string
	in      Input
	demands []float64
} {
	traffic, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	camera, err := pipeline.Load("../../examples/traffic-camera.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	camera = withFastClass(tb, camera, "fast", 3)
	sweep := func(from, to, step float64) (out []float64) {
		for d := from; d <= to+1e-9; d += step {
			out = append(out, d)
		}
		return out
	}
	return []struct {
		name    string
		in      Input
		demands []float64
	}{
		{"traffic-classes", Input{Spec: traffic, Cluster: plan.NewCluster(map[string]int{"cpu": 16, "fast": 4},
			plan.Prices{"cpu": 0.4, "fast": 2.5})}, sweep(50, 1500, 50)},
		{"traffic-camera+fast", Input{Spec: camera, Cluster: plan.NewCluster(map[string]int{"default": 16, "fast": 4},
			plan.Prices{"default": 1, "fast": 2.5})}, sweep(10, 200, 10)},
	}
}

// withFastClass is spec with every variant also on class, at speedup times its profile's speed (p50 and p95 divided
// by it): written as class_profiles and parsed again, as a spec file would give them.
func withFastClass(tb testing.TB, spec *pipeline.Spec, class string, speedup float64) *pipeline.Spec {
	return withFastClassOn(tb, spec, class, speedup, func(string) bool { return true })
}

// withFastClassOn is withFastClass on the tasks onTask holds only: the other tasks' variants are not deployed on class.
func withFastClassOn(tb testing.TB, spec *pipeline.Spec, class string, speedup float64,
	onTask func(task string) bool) *pipeline.Spec {
	for ti := range spec.Tasks {
		if !onTask(spec.Tasks[ti].Name) {
			continue
		}
		for vi := range spec.Tasks[ti].Variants {
			v := &spec.Tasks[ti].Variants[vi]
			var fast []pipeline.ProfilePoint
			for _, p := range v.Profile {
				p.P50Ms, p.P95Ms = p.P50Ms/speedup, p.P95Ms/speedup
				fast = append(fast, p)
			}
			v.ClassProfiles = map[string][]pipeline.ProfilePoint{class: fast}
		}
	}
	data, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := pipeline.ParseJSON(data)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// BenchmarkClassesSweep solves the examples on two priced server classes (classedSweeps) at every demand of their
// sweeps, per iteration every demand once, as Solve does (the planner's sequence). Metrics: the median and the
// slowest demand's solve ("median-ms", "max-ms"), the same over the demands planned in hardware mode ("hw-median-ms",
// "hw-max-ms"), and how many demands ended in each mode.
func BenchmarkClassesSweep(b *testing.B) {
	for _, c := range classedSweeps(b) {
		b.Run(c.name, func(b *testing.B) {
			var times, hw []float64
			modes := map[string]int{}
			for i := 0; i < b.N; i++ {
				for _, d := range c.demands {
					in := c.in
					in.Demand = d
					start := time.Now()
					r, err := Solve(in, Options{TimeLimit: benchLimit})
					if err != nil {
						b.Fatal(err)
					}
					times = append(times, float64(time.Since(start).Microseconds())/1000)
					modes[r.Mode]++
					if r.Mode == ModeHardware {
						hw = append(hw, times[len(times)-1])
					}
					if !r.Optimal {
						b.Logf("%s at %v QPS: not proven optimal (gap %.2g)", c.name, d, r.Gap)
					}
				}
			}
			slices.Sort(times)
			b.ReportMetric(times[len(times)/2], "median-ms")
			b.ReportMetric(times[len(times)-1], "max-ms")
			if len(hw) > 0 {
				slices.Sort(hw)
				b.ReportMetric(hw[len(hw)/2], "hw-median-ms")
				b.ReportMetric(hw[len(hw)-1], "hw-max-ms")
			}
			for _, m := range []string{ModeHardware, ModeAccuracy, ModeOverloaded} {
				b.ReportMetric(float64(modes[m])/float64(b.N), m)
			}
		})
	}
}

// TestClassedSweepsLoad: the benchmark's classed examples parse, with each variant on both classes.
func TestClassedSweepsLoad(t *testing.T) {
	for _, c := range classedSweeps(t) {
		if got := c.in.Spec.Classes(); len(got) != 2 {
			t.Errorf("%s: classes %v, want two", c.name, got)
		}
	}
}
