package allocate

import (
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// slowestLimit bounds each solve of BenchmarkSlowestSolve: far above the target (1 s), so that the slow tail shows
// as it is.
const slowestLimit = 10 * time.Second

// BenchmarkSlowestSolve solves, per iteration, every point of two corpora once, as the live planner does (one
// branch-and-bound worker per CPU), under both latency models, and reports the slowest solve ("max-ms"), the 99th
// percentile and the median of each:
//   - "lokilike-SHAPE": the Loki-like pipelines (lokiLike: two tasks, and three as a tree or a chain; seeds 0-2)
//     on 20 servers at 10:1500:60 QPS, 150 solves per shape;
//   - "example-NAME": each examples/*.yaml at the sweep `bin/sleipnir plan --sweep 10:1500:30` solves (20
//     servers), 100 solves each.
//
// The slowest point of each is logged. Run it alone on the machine: it measures wall time.
func BenchmarkSlowestSolve(b *testing.B) {
	for _, shape := range lokiShapes {
		b.Run("lokilike-"+shape, func(b *testing.B) {
			var ins []Input
			for seed := range uint64(3) {
				spec := lokiLike(b, shape, seed)
				for d := 10.0; d <= 1500; d += 60 {
					ins = append(ins, Input{Spec: spec, Demand: d, Servers: 20})
				}
			}
			benchSlowest(b, ins)
		})
	}
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range files {
		spec, err := pipeline.Load(f)
		if err != nil {
			continue // not a pipeline (a profile)
		}
		b.Run("example-"+spec.Name, func(b *testing.B) {
			var ins []Input
			for d := 10.0; d <= 1500; d += 30 {
				ins = append(ins, Input{Spec: spec, Demand: d, Servers: 20})
			}
			benchSlowest(b, ins)
		})
	}
}

// benchSlowest solves every input under both latency models, b.N times, and reports the times' max, p99 and median,
// the branch-and-bound nodes of all (which the machine's load does not move), the solves stopped at the limit,
// and the process's CPU time against the solves' wall time ("cpu/wall": under 1 when the machine is busy elsewhere;
// two workers on two idle cores make it up to 2).
func benchSlowest(b *testing.B, ins []Input) {
	var times []float64
	slowest, nodes, limited := "", 0, 0
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		times, nodes, limited = times[:0], 0, 0
		worst := 0.0
		for _, in := range ins {
			for _, lm := range []LatencyModel{LatencyBurst, LatencyLoki} {
				in.LatencyModel = lm
				res, err := Solve(in, Options{TimeLimit: slowestLimit})
				if err != nil {
					b.Fatalf("%s (%s) at %v QPS: %v", in.Spec.Name, lm, in.Demand, err)
				}
				times = append(times, res.SolveMs)
				nodes += res.Nodes
				if !res.Optimal {
					limited++
				}
				if res.SolveMs > worst {
					worst = res.SolveMs
					slowest = fmt.Sprintf("%s (%s) at %v QPS: %s, %.1f ms, %d nodes, optimal %v", in.Spec.Name, lm,
						in.Demand, res.Mode, res.SolveMs, res.Nodes, res.Optimal)
				}
			}
		}
	}
	wall := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu/wall")
	slices.Sort(times)
	b.ReportMetric(times[len(times)-1], "max-ms")
	b.ReportMetric(times[len(times)*99/100], "p99-ms")
	b.ReportMetric(times[len(times)/2], "median-ms")
	b.ReportMetric(float64(nodes), "nodes")
	b.ReportMetric(float64(limited), "limited")
	b.Logf("%d solves; the slowest: %s", len(times), slowest)
}

// liveLimit is the live planner's solve limit (services/planner's default --solve-time-limit).
const liveLimit = time.Second

// BenchmarkLiveLimitLoss measures what the live planner's solve limit costs where solves outlast it: each
// Loki-like shape (seed 0, 20 servers, burst model) at 70:1450:60 QPS, solved once within liveLimit as the live
// planner solves (one worker per CPU) and once within slowestLimit; it reports how many solves stopped at the live
// limit, and the largest and median loss of system accuracy of the limited plan, relative to the longer solve's
// ("loss-%"; a solve proven optimal within the live limit loses nothing). Run it alone on the machine: the limit is
// wall time, so a busy machine finds worse plans within it.
func BenchmarkLiveLimitLoss(b *testing.B) {
	for _, shape := range lokiShapes {
		b.Run("lokilike-"+shape, func(b *testing.B) {
			spec := lokiLike(b, shape, 0)
			for i := 0; i < b.N; i++ {
				var losses []float64
				limited := 0
				for d := 70.0; d <= 1450; d += 60 {
					in := Input{Spec: spec, Demand: d, Servers: 20}
					live, err := Solve(in, Options{TimeLimit: liveLimit})
					if err != nil {
						b.Fatal(err)
					}
					loss := 0.0
					if !live.Optimal {
						limited++
						long, err := Solve(in, Options{TimeLimit: slowestLimit})
						if err != nil {
							b.Fatal(err)
						}
						loss = max(0, 100*(long.SystemAccuracy-live.SystemAccuracy)/long.SystemAccuracy)
						if loss > 0.5 {
							b.Logf("%v QPS: %.5f within %v, %.5f within %v (optimal %v)", d, live.SystemAccuracy,
								liveLimit, long.SystemAccuracy, slowestLimit, long.Optimal)
						}
					}
					losses = append(losses, loss)
				}
				slices.Sort(losses)
				b.ReportMetric(float64(limited), "limited")
				b.ReportMetric(losses[len(losses)-1], "max-loss-%")
				b.ReportMetric(losses[len(losses)/2], "median-loss-%")
			}
		})
	}
}
