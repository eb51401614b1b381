package sim

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// BenchmarkSimulate runs ten simulated minutes of the traffic example on 20 servers, the planner's loop included,
// and reports simulated item-hops per second of wall time: hops/s overall, and hops/s-sim without the time the
// allocation MILP took (the simulator's own speed; the solves are the planner's, and cost what they cost live).
// hops/cpu-s is the first against the process's CPU time rather than wall time, which a shared machine moves less
// (planning included: the core's wall time, which a busy machine stretches, cannot be taken out of CPU time).
// At 150 QPS the plans are in hardware mode (solves well under a millisecond); at 600 in accuracy mode.
func BenchmarkSimulate(b *testing.B) {
	for _, qps := range []float64{150, 600} {
		b.Run(fmt.Sprintf("traffic-%gqps", qps), func(b *testing.B) { benchmarkSimulate(b, qps) })
	}
}

func benchmarkSimulate(b *testing.B, qps float64) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var hops int64
	var planning float64
	cpu0 := cpuSeconds()
	start := time.Now()
	for range b.N {
		res, err := Run(Config{Spec: spec, Workload: workload.Constant(qps, 10*time.Minute), Servers: 20, System: "loki",
			Seed: 1, CommLatency: -1})
		if err != nil {
			b.Fatal(err)
		}
		hops += res.Summary.ItemHops
		planning += res.Summary.PlanSeconds
	}
	wall := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpu0
	b.ReportMetric(float64(hops)/wall, "hops/s")
	b.ReportMetric(float64(hops)/(wall-planning), "hops/s-sim")
	b.ReportMetric(float64(hops)/cpu, "hops/cpu-s")
}

// cpuSeconds is the CPU time (user and system) the process has taken.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
