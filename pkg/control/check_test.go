package control_test

import (
	"flag"
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
)

func loadSpec(t *testing.T, name string) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestCheckedTightens: the paper's model plans the traffic camera at 72 QPS on 17 servers, and the check predicts
// more than 1% of the deadlines missed under its negative binomial fan-out, surely (by two standard errors); the
// search adds replicas where the queues formed while that holds, and records the candidates.
func TestCheckedTightens(t *testing.T) {
	spec := loadSpec(t, "traffic-camera.yaml")
	inner := control.MILP{Utilization: 0.85, Workers: 1, LatencyModel: allocate.LatencyLoki}
	checker := sim.Checker{Policy: "reroute", CommLatency: -1, Seed: 1}
	o := control.Observed{Demand: 72, Servers: 20}
	c := control.Checked{Inner: inner, Check: checker, Utilization: 0.85, MaxCandidates: 6}
	first, err := c.Inner.Allocate(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	once := c
	once.MaxCandidates = 1
	p0, err := once.Allocate(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	if p0.Allocation.Check.ViolationRatio <= control.DefaultCheckTarget {
		t.Fatalf("the paper's model's plan is predicted %.2f%%: the test needs one over the target",
			100*p0.Allocation.Check.ViolationRatio)
	}
	p, err := c.Allocate(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Allocation.Check
	t.Logf("first plan %d servers predicted %.2f%%; chosen %d servers predicted %.2f%% after %d candidates",
		first.Allocation.ActiveServers, 100*p0.Allocation.Check.ViolationRatio, p.Allocation.ActiveServers,
		100*got.ViolationRatio, got.Candidates)
	if got.Candidates < 2 || !got.Changed || got.ViolationRatio >= p0.Allocation.Check.ViolationRatio ||
		p.Allocation.ActiveServers <= first.Allocation.ActiveServers {
		t.Errorf("check %+v with %d servers: want a tightened plan (more servers, fewer violations predicted than "+
			"%.4f)", *got, p.Allocation.ActiveServers, p0.Allocation.Check.ViolationRatio)
	}
}

// TestCheckedTakesTheMoreAccuratePlan: on the traffic example at 600 QPS the burst model's plan is predicted well
// within 1%, and the paper's model's plan, more accurate, is too: the search takes it. With a target it cannot be
// sure to meet, it keeps the burst model's.
func TestCheckedTakesTheMoreAccuratePlan(t *testing.T) {
	spec := loadSpec(t, "traffic.yaml")
	burst := control.MILP{Utilization: 0.85, Workers: 1}
	loki := burst
	loki.LatencyModel = allocate.LatencyLoki
	o := control.Observed{Demand: 600, Servers: 20}
	want, err := loki.Allocate(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	base, err := burst.Allocate(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	if want.Allocation.SystemAccuracy <= base.Allocation.SystemAccuracy {
		t.Fatalf("the paper's plan (%v) is not more accurate than the burst model's (%v)",
			want.Allocation.SystemAccuracy, base.Allocation.SystemAccuracy)
	}
	c := control.Checked{Inner: burst, Loose: loki, Check: sim.Checker{Policy: "reroute", CommLatency: -1, Seed: 1},
		Utilization: 0.85}
	p, err := c.Allocate(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Allocation.Check
	t.Logf("burst %.4f, loki %.4f; chosen %.4f, predicted %.2f%%, %d candidates", base.Allocation.SystemAccuracy,
		want.Allocation.SystemAccuracy, p.Allocation.SystemAccuracy, 100*got.ViolationRatio, got.Candidates)
	if math.Abs(p.Allocation.SystemAccuracy-want.Allocation.SystemAccuracy) > 1e-9 || !got.Changed || got.Candidates != 2 ||
		got.ViolationRatio > control.DefaultCheckTarget {
		t.Errorf("chose accuracy %v (check %+v), want the paper's plan's %v", p.Allocation.SystemAccuracy, *got,
			want.Allocation.SystemAccuracy)
	}
	c.Target = 0.0001
	p, err = c.Allocate(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	if p.Allocation.SystemAccuracy > base.Allocation.SystemAccuracy+1e-9 {
		t.Errorf("target 0.01%%: chose accuracy %v, want the burst model's %v at most", p.Allocation.SystemAccuracy,
			base.Allocation.SystemAccuracy)
	}
}

// TestCheckFlags: --check and --check-target wrap the loki system's allocator in a Checked (the paper's model its
// looser plan) once a Checker is injected; without one, or for another system, the allocator is as before.
func TestCheckFlags(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := control.RegisterFlags(fs)
	if err := fs.Parse([]string{"--check", "--check-target", "0.02"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config()
	if err != nil || cfg.Check != control.CheckAll || cfg.CheckTarget != 0.02 {
		t.Fatalf("config %+v, %v", cfg, err)
	}
	spec := loadSpec(t, "traffic.yaml")
	if sys, _ := control.ParseSystem("loki", spec, cfg); sys.Allocator == nil {
		t.Fatal("no allocator")
	} else if _, ok := sys.Allocator.(control.Checked); ok {
		t.Error("checked without a Checker")
	}
	cfg.Checker = sim.Checker{}
	sys, err := control.ParseSystem("loki", spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := sys.Allocator.(control.Checked)
	if !ok || c.Target != 0.02 || c.Loose == nil || c.Loose.(control.MILP).LatencyModel != allocate.LatencyLoki {
		t.Errorf("loki with --check: allocator %#v", sys.Allocator)
	}
	if sys, _ := control.ParseSystem("proteus", spec, cfg); sys.Allocator == nil {
		t.Fatal("no allocator")
	} else if _, ok := sys.Allocator.(control.Checked); ok {
		t.Error("proteus checked")
	}
}

// TestCheckEdgeFlags: by default the plans at the edge are checked (CheckEdge: the loki allocator is a Checked of
// the plans in accuracy mode alone); --check-edge=false checks none.
func TestCheckEdgeFlags(t *testing.T) {
	spec := loadSpec(t, "traffic.yaml")
	for _, c := range []struct {
		args    []string
		checked bool
	}{{nil, true}, {[]string{"--check-edge=false"}, false}} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		f := control.RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.Config()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Checker = sim.Checker{}
		sys, err := control.ParseSystem("loki", spec, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ck, ok := sys.Allocator.(control.Checked)
		if ok != c.checked || ok && !ck.AccuracyModeOnly {
			t.Errorf("%v: allocator %#v, want checked %v, of the plans in accuracy mode alone", c.args,
				sys.Allocator, c.checked)
		}
	}
}

// TestCheckedAtTheEdgeOnly: a Checked of the plans in accuracy mode alone returns a plan in hardware mode as its
// allocator made it (the traffic example at 100 QPS on 20 servers), and checks one in accuracy mode (at 600 QPS).
func TestCheckedAtTheEdgeOnly(t *testing.T) {
	spec := loadSpec(t, "traffic.yaml")
	c := control.Checked{Inner: control.MILP{Utilization: 0.85, Workers: 1}, Check: sim.Checker{Policy: "reroute",
		CommLatency: -1, Seed: 1}, Utilization: 0.85, AccuracyModeOnly: true}
	for _, k := range []struct {
		qps     float64
		checked bool
	}{{100, false}, {600, true}} {
		p, err := c.Allocate(spec, control.Observed{Demand: k.qps, Servers: 20})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Allocation.Check != nil; got != k.checked {
			t.Errorf("%v QPS: a plan in %s mode, checked %v, want %v", k.qps, p.Mode, got, k.checked)
		}
	}
}
