package allocate

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestEnumeratedHardwarePointSatisfiesModel checks the point enumerateHardware builds by hand (flows, replicas and
// the spill columns of the leaves' open batch sizes) against the model's rows: a point that broke them would be
// dropped silently for a branch-and-bound solve.
func TestEnumeratedHardwarePointSatisfiesModel(t *testing.T) {
	var instances []Input
	for seed := uint64(0); seed < 200; seed++ {
		instances = append(instances, randomInstance(seed))
	}
	for _, ex := range []struct {
		file    string
		servers int
	}{{"../../examples/traffic.yaml", 20}, {"../../examples/ocr-chain.yaml", 6}} {
		spec, err := pipeline.Load(ex.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []float64{10, 100, 200, 300} {
			instances = append(instances, Input{Spec: spec, Demand: d, Servers: ex.servers})
		}
	}
	checked, spilled := 0, 0
	for i, in := range instances {
		m, err := build(in, stepHardware)
		if err != nil {
			continue
		}
		res, ok := m.enumerateHardware()
		if !ok || res.X == nil {
			continue
		}
		if v := m.prob.Violation(res.X); v > 1e-6 {
			t.Errorf("instance %d (%s, %v QPS, %d servers): the enumerated point violates the model by %g", i,
				in.Spec.Name, in.Demand, in.Servers, v)
		}
		for _, kv := range m.variants {
			for _, s := range kv.spillDownCol {
				if s > 0 && res.X[s] > 1e-9 {
					spilled++
					break
				}
			}
		}
		checked++
	}
	if checked < 50 || spilled == 0 {
		t.Fatalf("%d enumerated points checked, %d with load spilled to a faster batch size: too few to test", checked,
			spilled)
	}
	t.Logf("%d enumerated points checked, %d with load spilled to a faster batch size", checked, spilled)
}
