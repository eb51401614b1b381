package frontend

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/admission"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// TestRootByPolicy: with routing_mode ramsis, a frontend routes the root of the one-task car example by its tables
// until the policy is computed (in a goroutine), then by the policy from its requests in flight: effnet_b7 while its
// in-flight requests leave a request time to be served there, effnet_b0 when 200 are in flight at b7, b7 again once
// they are answered; by its tables while admission control bounds the pipeline. A pipeline of several tasks keeps
// its tables at the root.
func TestRootByPolicy(t *testing.T) {
	spec, err := pipeline.Load("../../examples/car.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec.RoutingMode = routing.ModeRAMSIS
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p, Demand: 850})
	f := &Frontend{log: slog.New(slog.DiscardHandler)}
	choose := func() (string, bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.rootByPolicy(spec, p, time.Now().Add(300*time.Millisecond))
	}
	testrig.Eventually(t, 30*time.Second, "the root's policy", func() bool { _, ok := choose(); return ok })
	sent := func(variant string, n float64) {
		f.mu.Lock()
		f.sentToRoot(spec.Name, variant, n)
		f.mu.Unlock()
	}
	for _, step := range []struct {
		b7   float64
		want string
	}{{0, "effnet_b7"}, {200, "effnet_b0"}, {-200, "effnet_b7"}} {
		sent("effnet_b7", step.b7)
		if v, ok := choose(); !ok || v != step.want {
			t.Errorf("after %v more in flight at effnet_b7: %q (%v), want %s", step.b7, v, ok, step.want)
		}
	}

	// While admission control bounds the pipeline, the tables route (the requests in flight are then the gate's).
	f.gate = admission.New(admission.Config{})
	now := time.Now()
	for range 10 {
		f.gate.Decide(admission.Request{Pipeline: spec.Name, Now: now, Deadline: now.Add(time.Second)},
			admission.Plan{Hosted: true})
		f.gate.Done(spec.Name, now, now, admission.Late)
	}
	if v, ok := choose(); ok {
		t.Errorf("congested: the root by policy (%s), want its tables", v)
	}
	f.gate = nil

	traffic, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	traffic.RoutingMode = routing.ModeRAMSIS
	tp, err := plan.Static(traffic)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	v, ok := f.rootByPolicy(traffic, tp, time.Now().Add(600*time.Millisecond))
	f.mu.Unlock()
	if ok {
		t.Errorf("traffic, three tasks: the root by policy (%s), want its tables", v)
	}
}
