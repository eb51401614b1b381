package plan_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func routedStatic(t *testing.T) (*pipeline.Spec, *plan.Plan) {
	t.Helper()
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.Epoch = 3
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p, Demand: 300, Utilization: 0.85})
	return spec, p
}

// clone deep-copies a plan through its wire form, as a reader of the bucket gets it.
func clone(t *testing.T, p *plan.Plan) *plan.Plan {
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out plan.Plan
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestValidatePlan: the planner's own plans pass; what a stray writer could put under plan.<p> (`{}`, `null`, a
// plan of another pipeline, of unknown variants, routing nowhere or to unhosted variants) is refused with a reason.
func TestValidatePlan(t *testing.T) {
	spec, good := routedStatic(t)
	if err := good.Validate(spec); err != nil {
		t.Fatalf("the planner's static plan, routed: %v", err)
	}
	other, err := pipeline.Load("../../examples/ocr-chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		edit       func(p *plan.Plan)
	}{
		{"empty object", "pipeline", func(p *plan.Plan) { *p = plan.Plan{} }},
		{"another pipeline", "pipeline", func(p *plan.Plan) { p.Pipeline = other.Name }},
		{"epoch 0", "epoch", func(p *plan.Plan) { p.Epoch = 0 }},
		{"unknown mode", "mode", func(p *plan.Plan) { p.Mode = "turbo" }},
		{"unknown variant", "does not have", func(p *plan.Plan) { p.Variants[0].Variant = "nope" }},
		{"no replicas", "replicas", func(p *plan.Plan) { p.Variants[0].Replicas = 0 }},
		{"huge replicas", "replicas", func(p *plan.Plan) { p.Variants[0].Replicas = 1 << 30 }},
		{"batch size not allowed", "max batch", func(p *plan.Plan) { p.Variants[0].MaxBatch = 3 }},
		{"negative capacity", "capacity", func(p *plan.Plan) { p.Variants[0].CapacityQPS = -1 }},
		{"no root routing", "root routing", func(p *plan.Plan) { p.Routing.Root = nil }},
		{"hosts nothing but routes", "does not host", func(p *plan.Plan) { p.Variants = nil }},
		{"root routes to an unhosted variant", "does not host", func(p *plan.Plan) {
			p.Routing.Root = []plan.Route{{Variant: "nope", Prob: 1}}
		}},
		{"probabilities do not sum to 1", "sum", func(p *plan.Plan) {
			p.Routing.Root = append(p.Routing.Root, p.Routing.Root[0])
		}},
		{"negative probability", "probability", func(p *plan.Plan) { p.Routing.Root[0].Prob = -1 }},
		{"routing from an unknown hop", "routing from", func(p *plan.Plan) {
			p.Routing.Downstream["nope/nope"] = nil
		}},
		{"routing to a task that is not a child", "not a child", func(p *plan.Plan) {
			for hop := range p.Routing.Downstream {
				p.Routing.Downstream[hop]["detect"] = nil
			}
		}},
		{"backup not hosted", "backup", func(p *plan.Plan) {
			p.Routing.Backup = map[string][]plan.Backup{"detect": {{Variant: "nope"}}}
		}},
		{"fanout of an unknown hop", "multiplicative", func(p *plan.Plan) {
			p.Fanout = map[string]pipeline.Fanout{"x/y": {Mean: 1}}
		}},
		{"negative demand", "allocation", func(p *plan.Plan) { p.Allocation = &plan.Allocation{DemandQPS: -5} }},
		{"latency profile of an unknown hop", "latency profile", func(p *plan.Plan) {
			p.Profiles = map[string][]pipeline.ProfilePoint{"x/y": {{Batch: 1, P50Ms: 1}}}
		}},
		{"latency profile with too few points", "latency profile", func(p *plan.Plan) {
			v := p.Variants[0]
			p.Profiles = map[string][]pipeline.ProfilePoint{wire.VariantKey{Task: v.Task, Variant: v.Variant}.String(): {{Batch: 1, P50Ms: 1}}}
		}},
		{"latency profile of a zero p50", "latency profile", func(p *plan.Plan) {
			v := p.Variants[0]
			points := append([]pipeline.ProfilePoint(nil), spec.Variant(v.Task, v.Variant).Profile...)
			points[1].P50Ms = 0
			p.Profiles = map[string][]pipeline.ProfilePoint{wire.VariantKey{Task: v.Task, Variant: v.Variant}.String(): points}
		}},
		{"latency profile of NaN", "latency profile", func(p *plan.Plan) {
			v := p.Variants[0]
			points := append([]pipeline.ProfilePoint(nil), spec.Variant(v.Task, v.Variant).Profile...)
			points[0].P95Ms = math.NaN()
			p.Profiles = map[string][]pipeline.ProfilePoint{wire.VariantKey{Task: v.Task, Variant: v.Variant}.String(): points}
		}},
	} {
		p := clone(t, good)
		c.edit(p)
		err := p.Validate(spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate says %v, want an error about %q", c.name, err, c.want)
		}
	}
	var null *plan.Plan
	if err := json.Unmarshal([]byte("null"), &null); err != nil || null.Validate(spec) == nil {
		t.Errorf("a null plan passes (%v)", err)
	}
	if err := good.Validate(nil); err == nil {
		t.Error("a plan passes without a spec to check it against")
	}
}

// TestValidatePlanThatHostsNothing: a plan that gives the pipeline no server (the joint division shed it: no
// variants, no routing) is a valid plan, which frontends and workers follow; only idle assignments go with it.
func TestValidatePlanThatHostsNothing(t *testing.T) {
	spec, good := routedStatic(t)
	empty := &plan.Plan{Pipeline: spec.Name, Epoch: good.Epoch + 1, Mode: plan.ModeOverloaded,
		Allocation: &plan.Allocation{DemandQPS: 0, Optimal: true}}
	if !empty.HostsNothing() || good.HostsNothing() {
		t.Fatalf("HostsNothing: %v for the empty plan, %v for the static one", empty.HostsNothing(), good.HostsNothing())
	}
	if err := clone(t, empty).Validate(spec); err != nil {
		t.Fatalf("a plan that hosts nothing is refused: %v", err)
	}
	if err := (plan.Assignment{Worker: "w1"}).Validate("w1", spec, empty); err != nil {
		t.Errorf("idle under a plan that hosts nothing: %v", err)
	}
	v := good.Variants[0]
	a := plan.Assignment{Worker: "w1", Pipeline: spec.Name, Task: v.Task, Variant: v.Variant, MaxBatch: v.MaxBatch,
		Epoch: empty.Epoch}
	if err := a.Validate("w1", spec, empty); err == nil {
		t.Error("an assignment to a variant passes under a plan that hosts nothing")
	}
}

// TestValidateAssignment: a worker follows only an assignment of its own, to a variant the plan in force hosts at
// that batch size, of the plan's epoch; idle always passes.
func TestValidateAssignment(t *testing.T) {
	spec, p := routedStatic(t)
	v := p.Variants[0]
	good := plan.Assignment{Worker: "w1", Pipeline: spec.Name, Task: v.Task, Variant: v.Variant, MaxBatch: v.MaxBatch,
		BudgetMs: v.BudgetMs, Epoch: p.Epoch}
	if err := good.Validate("w1", spec, p); err != nil {
		t.Fatalf("the planner's assignment: %v", err)
	}
	if err := (plan.Assignment{Worker: "w1"}).Validate("w1", nil, nil); err != nil {
		t.Errorf("idle: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(a *plan.Assignment)
	}{
		{"another worker's", func(a *plan.Assignment) { a.Worker = "w2" }},
		{"unknown variant", func(a *plan.Assignment) { a.Variant = "nope" }},
		{"batch 0", func(a *plan.Assignment) { a.MaxBatch = 0 }},
		{"batch not allowed", func(a *plan.Assignment) { a.MaxBatch = 1000 }},
		{"older epoch", func(a *plan.Assignment) { a.Epoch-- }},
		{"newer epoch", func(a *plan.Assignment) { a.Epoch++ }},
		{"NaN budget", func(a *plan.Assignment) { a.BudgetMs = math.NaN() }},
		{"a variant the plan does not host", func(a *plan.Assignment) {
			for _, tv := range spec.Task(v.Task).Variants {
				if !p.Hosts(v.Task, tv.Name) {
					a.Variant = tv.Name
					return
				}
			}
			t.Fatal("the plan hosts every variant of its first task")
		}},
	} {
		a := good
		c.edit(&a)
		if err := a.Validate("w1", spec, p); err == nil {
			t.Errorf("%s: passes", c.name)
		}
	}
}

// TestValidateRegistration: a heartbeat passes only under its own key, with its times in order and near when the
// bucket stored it, and what it says it cannot serve named and bounded.
func TestValidateRegistration(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	good := wire.Registration{ID: "w1", Started: now.Add(-time.Minute), Updated: now, Heartbeat: 60}
	if err := plan.ValidateRegistration("w1", good, now); err != nil {
		t.Fatal(err)
	}
	failing := func(r *wire.Registration) *wire.AssignmentFailure {
		r.Failing = &wire.AssignmentFailure{Variant: "p:a/x", Reason: "no model", Since: now, Attempts: 1}
		return r.Failing
	}
	if r := good; failing(&r) != nil && plan.ValidateRegistration("w1", r, now) != nil {
		t.Fatal("a heartbeat saying it cannot serve p:a/x is refused")
	}
	for _, c := range []struct {
		name string
		edit func(r *wire.Registration)
	}{
		{"empty", func(r *wire.Registration) { *r = wire.Registration{} }},
		{"another id", func(r *wire.Registration) { r.ID = "w2" }},
		{"updated before started", func(r *wire.Registration) { r.Started = now.Add(time.Second) }},
		{"far future", func(r *wire.Registration) { r.Updated = now.Add(time.Hour) }},
		{"no heartbeat", func(r *wire.Registration) { r.Heartbeat = 0 }},
		{"failing no variant", func(r *wire.Registration) { failing(r).Variant = "" }},
		{"failing a bad name", func(r *wire.Registration) { failing(r).Variant = "p:a/x.y" }},
		{"failing not pipeline:task/variant", func(r *wire.Registration) { failing(r).Variant = "a/x" }},
		{"failing a long reason", func(r *wire.Registration) {
			failing(r).Reason = strings.Repeat("x", wire.MaxFailureReason+1)
		}},
		{"failing no attempt", func(r *wire.Registration) { failing(r).Attempts = 0 }},
		{"failing since after updated", func(r *wire.Registration) { failing(r).Since = now.Add(time.Second) }},
	} {
		r := good
		c.edit(&r)
		if err := plan.ValidateRegistration("w1", r, now); err == nil {
			t.Errorf("%s: passes", c.name)
		}
	}
}
