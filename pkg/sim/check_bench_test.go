package sim

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// BenchmarkCheck is one plan check (Checker.Check) of the traffic example's plan at 600 QPS on 20 servers, Poisson
// arrivals; the issue bounds it at 200 ms (ms/check).
func BenchmarkCheck(b *testing.B) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	o := control.Observed{Demand: 600, Servers: 20}
	p, err := control.MILP{Utilization: 0.85, Workers: 1}.Allocate(spec, o)
	if err != nil {
		b.Fatal(err)
	}
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p, Demand: o.Demand, Utilization: 0.85})
	c := Checker{Policy: "reroute", CommLatency: -1, Seed: 1}
	b.ResetTimer()
	for range b.N {
		if _, err := c.Check(spec, p, o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/check")
}
