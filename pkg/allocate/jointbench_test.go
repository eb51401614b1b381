package allocate

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// jointBenchLimit bounds each MILP solve of BenchmarkSolveJoint: long enough that the demands of its sweep are proven
// optimal on a busy machine, so that the times are the proofs' and not the limit's.
const jointBenchLimit = 30 * time.Second

// BenchmarkSolveJoint solves the joint plan of three pipelines (traffic, ocr-chain and traffic-camera) on 40 servers
// at every demand of a sweep: each at f times 400, 150 and 40 QPS for f = 0.25, 0.5, ..., 2 (hardware scaling up to
// f = 0.75; past it accuracy scaling, with traffic-camera given up first, its demand being the smallest), with the
// live planner's utilization, 0.85. Per iteration every demand once. Metrics: the median, 99th percentile and
// slowest demand's solve over the iteration's demands ("median-ms", "p99-ms", "max-ms", of all the demands of every
// iteration), and the nodes in all.
func BenchmarkSolveJoint(b *testing.B) {
	specs := []string{"traffic.yaml", "ocr-chain.yaml", "traffic-camera.yaml"}
	base := []float64{400, 150, 40}
	var in JointInput
	in.Servers = 40
	for _, f := range specs {
		in.Pipelines = append(in.Pipelines, Input{Spec: loadSpec(b, f, 0), Utilization: 0.85})
	}
	for _, workers := range []int{1, 0} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var times []float64
			nodes := 0
			for i := 0; i < b.N; i++ {
				for f := 0.25; f <= 2; f += 0.25 {
					for k := range in.Pipelines {
						in.Pipelines[k].Demand = base[k] * f
					}
					res, err := SolveJoint(in, Options{Workers: workers, TimeLimit: jointBenchLimit})
					if err != nil {
						b.Fatal(err)
					}
					if !res.Optimal {
						b.Logf("f=%v: not proven optimal within %v (gap %.3g)", f, jointBenchLimit, res.Gap)
					}
					times = append(times, res.SolveMs)
					nodes += res.Nodes
				}
			}
			slices.Sort(times)
			b.ReportMetric(times[len(times)/2], "median-ms")
			b.ReportMetric(times[min(len(times)-1, len(times)*99/100)], "p99-ms")
			b.ReportMetric(times[len(times)-1], "max-ms")
			b.ReportMetric(float64(nodes)/float64(b.N), "nodes/op")
		})
	}
}
