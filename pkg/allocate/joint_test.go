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

// TestJointOnePipelineIsSolve: one pipeline through the joint MILP gets Solve's plan, at every other demand of the
// sweeps of TestSweepProven (past the switch points, overloaded included) and at hardware-scaling demands below
// them, under both latency models.
func TestJointOnePipelineIsSolve(t *testing.T) {
	for _, c := range sweeps {
		spec, err := pipeline.Load(c.file)
		if err != nil {
			t.Fatal(err)
		}
		demands := []float64{c.from / 4, c.from / 2}
		for d := c.from; d <= c.to; d += 2 * c.step {
			demands = append(demands, d)
		}
		for _, d := range demands {
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

// solveAlone is Solve's plan of in on servers.
func solveAlone(t *testing.T, in Input, servers int) *Result {
	t.Helper()
	in.Servers = servers
	r, err := Solve(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestJointBeatsEvenSplit: traffic at 300 QPS and ocr-chain at 20 QPS on 20 servers (issue 37's case). Split
// evenly, traffic runs in accuracy mode on its 10; jointly it gets the servers ocr-chain does not need: at full
// utilization its single-pipeline hardware plan, and at the live planner's 0.85 (where that plan takes all 20) its
// single-pipeline accuracy within 0.005, ocr-chain at its most accurate either way.
func TestJointBeatsEvenSplit(t *testing.T) {
	traffic, ocr := loadSpec(t, "traffic.yaml", 0), loadSpec(t, "ocr-chain.yaml", 0)
	for _, util := range []float64{1, 0.85} {
		ins := []Input{{Spec: traffic, Demand: 300, Utilization: util}, {Spec: ocr, Demand: 20, Utilization: util}}
		r, err := SolveJoint(JointInput{Pipelines: ins, Servers: 20}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		alone, half := solveAlone(t, ins[0], 20), solveAlone(t, ins[0], 10)
		top := solveAlone(t, ins[1], 20)
		tr, oc := r.Pipelines[0], r.Pipelines[1]
		t.Logf("utilization %v: traffic %s on %d at %.4f (alone %s %.4f, on half %s %.4f); ocr-chain %s on %d at "+
			"%.4f; %.0f ms", util, tr.Mode, tr.ServersUsed, tr.SystemAccuracy, alone.Mode, alone.SystemAccuracy,
			half.Mode, half.SystemAccuracy, oc.Mode, oc.ServersUsed, oc.SystemAccuracy, r.SolveMs)
		if r.ServersUsed > 20 || tr.ServedQPS != 300 || oc.ServedQPS != 20 || !r.Optimal {
			t.Errorf("utilization %v: %d servers used, served %v and %v, optimal %v", util, r.ServersUsed,
				tr.ServedQPS, oc.ServedQPS, r.Optimal)
		}
		if tr.SystemAccuracy < alone.SystemAccuracy-0.005 || tr.SystemAccuracy <= half.SystemAccuracy+0.01 {
			t.Errorf("utilization %v: traffic at %.4f; alone %.4f, on an even split %.4f", util, tr.SystemAccuracy,
				alone.SystemAccuracy, half.SystemAccuracy)
		}
		if math.Abs(oc.SystemAccuracy-top.SystemAccuracy) > 1e-9 {
			t.Errorf("utilization %v: ocr-chain at %.4f, its most accurate %.4f", util, oc.SystemAccuracy,
				top.SystemAccuracy)
		}
		if util == 1 && (tr.Mode != ModeHardware || oc.Mode != ModeHardware ||
			math.Abs(tr.SystemAccuracy-alone.SystemAccuracy) > 1e-9) {
			t.Errorf("full utilization: traffic %s at %.4f, ocr-chain %s: want both in hardware mode, traffic at %.4f",
				tr.Mode, tr.SystemAccuracy, oc.Mode, alone.SystemAccuracy)
		}
	}
}

// TestJointPriorities: traffic in a high class and ocr-chain in a low one on 20 servers. As ocr-chain's demand
// grows, traffic keeps the accuracy it has alone while ocr-chain runs at its most accurate, then degrades, then is
// shed in part; once traffic needs every server, ocr-chain gets nothing. With both in one class, ocr-chain's demand
// costs traffic accuracy instead: the classes are what protects it.
func TestJointPriorities(t *testing.T) {
	high, low := loadSpec(t, "traffic.yaml", 5), loadSpec(t, "ocr-chain.yaml", 0)
	cases := []struct {
		traffic, ocr float64
		mode         string // ocr-chain's
		shed         bool   // ocr-chain served less than its demand
	}{
		{200, 20, ModeHardware, false},
		{200, 250, ModeAccuracy, false},
		{200, 900, ModeOverloaded, true},
		{300, 100, ModeOverloaded, true}, // traffic in hardware mode takes all 20: nothing left
		{700, 100, ModeOverloaded, true}, // traffic in accuracy mode takes all 20: nothing left
	}
	prevAcc := 2.0
	for _, c := range cases {
		ins := []Input{{Spec: high, Demand: c.traffic, Utilization: 0.85}, {Spec: low, Demand: c.ocr, Utilization: 0.85}}
		r, err := SolveJoint(JointInput{Pipelines: ins, Servers: 20}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		tr, oc, alone := r.Pipelines[0], r.Pipelines[1], solveAlone(t, ins[0], 20)
		t.Logf("traffic %v QPS: %s on %d at %.4f (alone %.4f); ocr-chain %v QPS: %s on %d at %.4f serving %.1f; "+
			"%.0f ms", c.traffic, tr.Mode, tr.ServersUsed, tr.SystemAccuracy, alone.SystemAccuracy, c.ocr, oc.Mode,
			oc.ServersUsed, oc.SystemAccuracy, oc.ServedQPS, r.SolveMs)
		if tr.Mode != alone.Mode || math.Abs(tr.SystemAccuracy-alone.SystemAccuracy) > 1e-6 || tr.ServedQPS != c.traffic {
			t.Errorf("traffic %v + ocr-chain %v: the high class %s at %.4f serving %v; alone %s at %.4f", c.traffic,
				c.ocr, tr.Mode, tr.SystemAccuracy, tr.ServedQPS, alone.Mode, alone.SystemAccuracy)
		}
		if oc.Mode != c.mode || (oc.ServedQPS < c.ocr*(1-1e-6)) != c.shed || r.ServersUsed > 20 {
			t.Errorf("traffic %v + ocr-chain %v: the low class %s serving %.1f on %d of %d servers used", c.traffic,
				c.ocr, oc.Mode, oc.ServedQPS, oc.ServersUsed, r.ServersUsed)
		}
		if c.traffic == 200 {
			if oc.SystemAccuracy > prevAcc+1e-9 {
				t.Errorf("ocr-chain at %v QPS: accuracy %.4f, above %.4f at a lower demand", c.ocr, oc.SystemAccuracy,
					prevAcc)
			}
			prevAcc = oc.SystemAccuracy
		}
		if c.traffic >= 300 && oc.ServedQPS != 0 {
			t.Errorf("traffic %v: ocr-chain served %.1f QPS, want nothing left", c.traffic, oc.ServedQPS)
		}
	}
	// One class: ocr-chain's 250 QPS now costs traffic accuracy.
	same := *high
	same.Priority = 0
	r, err := SolveJoint(JointInput{Servers: 20, Pipelines: []Input{{Spec: &same, Demand: 200, Utilization: 0.85},
		{Spec: low, Demand: 250, Utilization: 0.85}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if alone := solveAlone(t, Input{Spec: &same, Demand: 200, Utilization: 0.85}, 20); r.Pipelines[0].SystemAccuracy >=
		alone.SystemAccuracy-1e-6 {
		t.Errorf("one class: traffic at %.4f, alone %.4f: want ocr-chain's demand to cost it accuracy",
			r.Pipelines[0].SystemAccuracy, alone.SystemAccuracy)
	}
}
