package control

import (
	"errors"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

func trafficSpec(t *testing.T) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// failing is an allocator that always fails, counting its calls.
type failing struct{ calls *int }

func (f failing) Allocate(*pipeline.Spec, Observed) (*plan.Plan, error) {
	*f.calls++
	return nil, errors.New("no")
}

// TestLoop walks the loop through a sequence of ticks and checks what each decides.
func TestLoop(t *testing.T) {
	spec := trafficSpec(t)
	static, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	l := New(spec, Config{Headroom: 0.05}, MILP{Utilization: 0.85, TimeLimit: 5 * time.Second}, static)
	t0 := time.Unix(1000, 0)
	type want struct {
		publish, replanned bool
	}
	steps := []struct {
		name string
		at   time.Duration
		o    Observed
		want want
	}{
		{"first tick solves", 0, Observed{Demand: 100, Servers: 20}, want{true, true}},
		{"steady: nothing", time.Second, Observed{Demand: 102, Servers: 20}, want{false, false}},
		{"demand down 12%: routing only", 2 * time.Second, Observed{Demand: 88, Servers: 20}, want{true, false}},
		{"demand above the plan's headroom: re-plan", 3 * time.Second, Observed{Demand: 106, Servers: 20}, want{true, true}},
		{"demand +30%: re-plan", 4 * time.Second, Observed{Demand: 130, Servers: 20}, want{true, true}},
		{"a worker left: re-plan", 5 * time.Second, Observed{Demand: 130, Servers: 19}, want{true, true}},
		{"re-plan due but within 5%: routing only (due too)", 15 * time.Second, Observed{Demand: 132, Servers: 19}, want{true, false}},
		{"just routed: nothing", 16 * time.Second, Observed{Demand: 132, Servers: 19}, want{false, false}},
		{"due and 8% less: re-plan", 26 * time.Second, Observed{Demand: 121, Servers: 19}, want{true, true}},
		{"overload: accuracy mode", 27 * time.Second, Observed{Demand: 600, Servers: 19}, want{true, true}},
		{"beyond capacity: overloaded", 28 * time.Second, Observed{Demand: 5000, Servers: 19}, want{true, true}},
		{"more demand on an overloaded plan: no solve", 29 * time.Second, Observed{Demand: 5100, Servers: 19}, want{false, false}},
	}
	epoch := l.Current().Epoch
	for _, s := range steps {
		now := t0.Add(s.at)
		st := l.Next(now, s.o)
		if st.Err != nil {
			t.Fatalf("%s: %v", s.name, st.Err)
		}
		if (st.Plan != nil) != s.want.publish || st.Replanned != s.want.replanned {
			t.Fatalf("%s: publish %v replanned %v, want %v %v", s.name, st.Plan != nil, st.Replanned,
				s.want.publish, s.want.replanned)
		}
		if st.Plan != nil {
			if err := st.Plan.Validate(spec); err != nil {
				t.Fatalf("%s: the loop's plan fails validation: %v", s.name, err)
			}
		}
		l.Published(st, s.o, now)
		if st.Replanned {
			epoch++
		}
		if got := l.Current().Epoch; got != epoch {
			t.Fatalf("%s: epoch %d, want %d", s.name, got, epoch)
		}
	}
	if m := l.Current().Mode; m != plan.ModeOverloaded {
		t.Fatalf("mode at 5000 QPS on 19 servers: %s, want %s", m, plan.ModeOverloaded)
	}
	if len(l.Current().Routing.Root) == 0 {
		t.Fatal("the plan has no root routing")
	}
}

// TestLoopFailure: a failed solve keeps the plan, is not retried every second, and still lets the routing follow
// the demand.
func TestLoopFailure(t *testing.T) {
	spec := trafficSpec(t)
	static, _ := plan.Static(spec)
	calls := 0
	l := New(spec, Config{}, failing{&calls}, static)
	t0 := time.Unix(1000, 0)
	o := Observed{Demand: 100, Servers: 20}
	st := l.Next(t0, o)
	if st.Err == nil || calls != 1 {
		t.Fatalf("first tick: err %v, calls %d", st.Err, calls)
	}
	if st.Plan == nil || st.Replanned {
		t.Fatal("the routing should still follow the demand after a failed re-plan")
	}
	l.Published(st, o, t0)
	if st = l.Next(t0.Add(time.Second), o); st.Err != nil || calls != 1 || st.Plan != nil {
		t.Fatalf("second tick retried the solve (calls %d) or published (%v)", calls, st.Plan != nil)
	}
	if l.Current().Epoch != static.Epoch {
		t.Fatal("a failed re-plan changed the epoch")
	}
}

// TestLoopResume: a loop resumed from a plan read back from the bucket keeps it while the demand and the servers
// are those it was sized for (a restarted planner moves no worker), and re-plans once they move.
func TestLoopResume(t *testing.T) {
	spec := trafficSpec(t)
	static, _ := plan.Static(spec)
	alloc := MILP{Utilization: 0.85, TimeLimit: 5 * time.Second}
	t0 := time.Unix(1000, 0)
	first := New(spec, Config{}, alloc, static)
	o := Observed{Demand: 200, Servers: 20}
	st := first.Next(t0, o)
	if !st.Replanned {
		t.Fatal("the first loop did not plan")
	}
	first.Published(st, o, t0)
	kept := first.Current()

	l := Resume(spec, Config{}, alloc, kept, t0.Add(time.Minute))
	for i := 1; i <= 5; i++ {
		if st := l.Next(t0.Add(time.Minute+time.Duration(i)*time.Second), Observed{Demand: 205, Servers: 20}); st.Plan != nil {
			t.Fatalf("tick %d after resuming: published (replanned %v) with the demand and servers unchanged", i,
				st.Replanned)
		}
	}
	if l.Current() != kept {
		t.Fatal("the resumed loop's plan is not the one it resumed from")
	}
	st = l.Next(t0.Add(time.Minute+6*time.Second), Observed{Demand: 205, Servers: 19})
	if !st.Replanned || st.Plan.Epoch != kept.Epoch+1 {
		t.Fatalf("a worker fewer: replanned %v, want a re-plan under epoch %d", st.Replanned, kept.Epoch+1)
	}
}

// TestLoopHoldsWithoutDemand: with no demand measured yet, the plan in force stands: neither solved for the 0 of no
// data nor routed for it.
func TestLoopHoldsWithoutDemand(t *testing.T) {
	spec := trafficSpec(t)
	static, _ := plan.Static(spec)
	l := New(spec, Config{}, MILP{Utilization: 0.85, TimeLimit: 5 * time.Second}, static)
	t0 := time.Unix(1000, 0)
	for i := 0; i < 15; i++ {
		if st := l.Next(t0.Add(time.Duration(i)*time.Second), Observed{Servers: 20, DemandUnknown: true}); st.Plan != nil {
			t.Fatalf("tick %d without demand data published a plan of %d servers", i, st.Plan.Servers())
		}
	}
	if st := l.Next(t0.Add(15*time.Second), Observed{Servers: 20}); !st.Replanned {
		t.Fatal("once the demand is known (0), the loop should plan for it")
	}
}
