package allocate

import (
	"math"
	"reflect"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// loadSpec loads an example pipeline, at priority class (0 keeps the file's).
func loadSpec(t testing.TB, file string, class int) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/" + file)
	if err != nil {
		t.Fatal(err)
	}
	if class > 0 {
		spec.Priority = class
	}
	return spec
}

// TestJointOnePipelineIsSolve: one pipeline through the joint MILP gets Solve's plan, on the sweep instances of
// TestSweepProven (both sides of the switch points and overloaded) and hardware-scaling demands below them, under
// both latency models.
func TestJointOnePipelineIsSolve(t *testing.T) {
	for _, c := range []struct {
		file           string
		servers        int
		from, to, step float64
	}{
		{"traffic.yaml", 20, 100, 1200, 100},
		{"ocr-chain.yaml", 6, 50, 500, 50},
	} {
		spec := loadSpec(t, c.file, 0)
		for d := c.from; d <= c.to; d += c.step {
			for _, lm := range []LatencyModel{LatencyBurst, LatencyLoki} {
				in := Input{Spec: spec, Demand: d, Servers: c.servers, Utilization: 0.85, LatencyModel: lm}
				want, err := Solve(in, Options{Workers: 1})
				if err != nil {
					t.Fatal(err)
				}
				joint, err := SolveJoint(JointInput{Pipelines: []Input{in}, Servers: c.servers}, Options{Workers: 1})
				if err != nil {
					t.Fatalf("%s at %v QPS (%s): %v", spec.Name, d, lm, err)
				}
				got := joint.Pipelines[0]
				if got.Mode != want.Mode || got.ServersUsed != want.ServersUsed || joint.ServersUsed != want.ServersUsed ||
					math.Abs(got.SystemAccuracy-want.SystemAccuracy) > 1e-9 ||
					math.Abs(got.ServedQPS-want.ServedQPS) > 1e-6*max(1, want.ServedQPS) ||
					!reflect.DeepEqual(got.Variants, want.Variants) {
					t.Errorf("%s at %v QPS (%s): joint %s on %d servers at %.6f serving %.3f %+v; Solve %s on %d at "+
						"%.6f serving %.3f %+v", spec.Name, d, lm, got.Mode, got.ServersUsed, got.SystemAccuracy,
						got.ServedQPS, got.Variants, want.Mode, want.ServersUsed, want.SystemAccuracy, want.ServedQPS,
						want.Variants)
				}
			}
		}
	}
}

// TestJointExplore logs joint plans (scratch).
func TestJointExplore(t *testing.T) {
	traffic, ocr := loadSpec(t, "traffic.yaml", 0), loadSpec(t, "ocr-chain.yaml", 0)
	for _, dt := range []float64{300, 500, 700} {
		for _, do := range []float64{20, 100, 200} {
			r, err := SolveJoint(JointInput{Servers: 20, Pipelines: []Input{
				{Spec: traffic, Demand: dt, Utilization: 0.85}, {Spec: ocr, Demand: do, Utilization: 0.85}}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range r.Pipelines {
				t.Logf("%v+%v: %s %d servers acc %.4f served %.1f", dt, do, p.Mode, p.ServersUsed, p.SystemAccuracy, p.ServedQPS)
			}
			t.Logf("  %.1f ms, %d nodes", r.SolveMs, r.Nodes)
		}
	}
}
