package sim

import "testing"

// BenchmarkCheck is one plan check (Checker.Check) of the traffic example's plan at 600 QPS on 20 servers, Poisson
// arrivals; the issue bounds it at 200 ms (ms/check).
func BenchmarkCheck(b *testing.B) {
	spec, p, o := trafficPlan(b, 600)
	c := Checker{Policy: "reroute", CommLatency: -1, Seed: 1}
	b.ResetTimer()
	for range b.N {
		if _, err := c.Check(spec, p, o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/check")
}
