package control

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

func traffic(t *testing.T) *pipeline.Spec {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestInferLine(t *testing.T) {
	spec := traffic(t)
	a := NewInferLine(MILP{Utilization: 0.85, TimeLimit: 5 * time.Second})
	for _, tc := range []struct {
		demand float64
		mode   string
	}{{100, plan.ModeHardware}, {800, plan.ModeOverloaded}} {
		p, err := a.Allocate(spec, Observed{Demand: tc.demand, Servers: 20})
		if err != nil {
			t.Fatal(err)
		}
		if p.Mode != tc.mode {
			t.Errorf("%v QPS: mode %s, want %s", tc.demand, p.Mode, tc.mode)
		}
		for _, v := range p.Variants {
			if v.Variant != spec.Task(v.Task).MostAccurate().Name {
				t.Errorf("%v QPS: hosts %s/%s, not the most accurate", tc.demand, v.Task, v.Variant)
			}
		}
	}
	if len(spec.Task("detect").Variants) < 2 {
		t.Fatal("MostAccurateOnly changed the spec it was given")
	}
}

func TestProteus(t *testing.T) {
	spec := traffic(t)
	a := Proteus{MILP{Utilization: 0.85, TimeLimit: 5 * time.Second}}
	for _, demand := range []float64{20, 300, 900} {
		p, err := a.Allocate(spec, Observed{Demand: demand, Servers: 20})
		if err != nil {
			t.Fatal(err)
		}
		if p.Servers() != 20 {
			t.Errorf("%v QPS: %d servers busy, want all 20", demand, p.Servers())
		}
		for _, task := range spec.Tasks {
			if len(p.Hosted(spec, task.Name)) == 0 {
				t.Errorf("%v QPS: task %s has no variant", demand, task.Name)
			}
		}
	}
	if _, err := a.Allocate(spec, Observed{Demand: 10, Servers: 2}); err == nil {
		t.Error("2 servers for 3 tasks: no error")
	}
	// Its routing ignores accuracy: capacity shares.
	p, _ := a.Allocate(spec, Observed{Demand: 900, Servers: 20})
	r := a.Route(routingInput(spec, p))
	sum := 0.0
	for _, rt := range r.Root {
		sum += rt.Prob
	}
	if len(r.Root) == 0 || sum < 0.999 || sum > 1.001 || len(r.Backup) != 0 {
		t.Errorf("root routes %v (sum %v), backups %v", r.Root, sum, r.Backup)
	}
}

func TestServerShares(t *testing.T) {
	spec := traffic(t)
	d := map[string]float64{"detect": 100, "classify_car": 300, "recognize_face": 50}
	s := serverShares(spec, d, 20)
	total := 0
	for _, n := range s {
		total += n
		if n < 1 {
			t.Fatalf("shares %v: a task without a server", s)
		}
	}
	if total != 20 {
		t.Fatalf("shares %v sum to %d", s, total)
	}
}

func routingInput(spec *pipeline.Spec, p *plan.Plan) routing.Input {
	return routing.Input{Spec: spec, Plan: p, Demand: 900}
}
