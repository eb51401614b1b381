package control

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestShareChangeKeepsAHardwarePlan: a pipeline's share of a shared cluster moves by a server or so each time the
// division is made again. A plan in hardware mode that covers the estimate with its headroom, fits the new share and
// had servers to spare of every class it grew in is kept without a solve, and published again on its new servers
// under its epoch; the other cases re-plan at once (trigger "servers"), as before. The allocator's second plan differs in batch sizes only, so that a solve shows as a new
// epoch.
func TestShareChangeKeepsAHardwarePlan(t *testing.T) {
	ocr := ocrSpec(t)
	mk := func(mode string, batch int, demand float64, class string) *plan.Plan {
		return ocrPlan(ocr, mode, batch, 0.6, demand, class)
	}
	uniform := func(n int) plan.Cluster { return plan.Uniform(n) }
	twoClasses := func(def, fast int) plan.Cluster {
		return plan.NewCluster(map[string]int{"default": def, "fast": fast}, nil)
	}
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name     string
		mode     string
		headroom float64
		class    string // the detector's server class ("": the default)
		from, to plan.Cluster
		keeps    bool
	}{
		{"a server more", plan.ModeHardware, 0, "", uniform(10), uniform(11), true},
		{"a server less, the plan still fits", plan.ModeHardware, 0, "", uniform(10), uniform(9), true},
		{"fewer servers than the plan takes", plan.ModeHardware, 0, "", uniform(10), uniform(1), false},
		{"accuracy mode: more servers may buy accuracy", plan.ModeAccuracy, 0, "", uniform(10), uniform(11), false},
		{"no headroom: sized for the estimate alone", plan.ModeHardware, -1, "", uniform(10), uniform(11), false},
		{"more of a class it had to spare", plan.ModeHardware, 0, "@fast", twoClasses(5, 2), twoClasses(6, 3), true},
		{"more of a class it took every server of", plan.ModeHardware, 0, "@fast", twoClasses(5, 1),
			twoClasses(5, 2), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			demand := cfgPlanned(c.headroom, 10)
			next := mk(c.mode, 1, demand, c.class)
			calls := 0
			alloc := allocFunc(func() *plan.Plan { calls++; p := *next; return &p })
			l := New(ocr, Config{Headroom: c.headroom}, alloc, mk(c.mode, 1, demand, c.class))
			o := Observed{Demand: 10, Servers: c.from.Total(), Cluster: c.from}
			st := l.Next(t0, o)
			l.Published(st, o, t0)
			next = mk(c.mode, 2, demand, c.class)
			before := calls
			o.Servers, o.Cluster = c.to.Total(), c.to
			st = l.Next(t0.Add(time.Second), o)
			if kept := calls == before && !st.Replanned; kept != c.keeps {
				t.Fatalf("kept the plan %v (solves %d, re-planned %v, trigger %q), want %v", kept, calls-before,
					st.Replanned, st.Trigger, c.keeps)
			}
			if !c.keeps && st.Trigger != TriggerServers {
				t.Errorf("trigger %q, want %q", st.Trigger, TriggerServers)
			}
			// Kept, it is published again on its new servers, under its epoch: no worker moves.
			if c.keeps && (st.Plan == nil || st.Plan.Epoch != l.Current().Epoch ||
				st.Plan.Allocation.ClusterServers != c.to.Total() || len(st.Plan.Variants) != 2 ||
				st.Plan.Variants[0].MaxBatch != 1) {
				t.Errorf("kept: published %+v, want the plan in force on %d servers", st.Plan, c.to.Total())
			}
		})
	}
}

// TestLoopShedsWithoutServers: a pipeline the division left no worker gets a plan that hosts nothing and serves none
// of its demand, and plans again as soon as it has workers.
func TestLoopShedsWithoutServers(t *testing.T) {
	spec := trafficSpec(t)
	first, err := FirstPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	l := New(spec, Config{SolveWorkers: 1}, MILP{Utilization: 0.85, Workers: 1}, first)
	now := time.Unix(1000, 0)
	o := Observed{Demand: 200, Servers: 0}
	st := l.Next(now, o)
	if st.Plan == nil || !st.Replanned || len(st.Plan.Variants) != 0 || st.Plan.Mode != plan.ModeOverloaded ||
		st.Plan.Allocation.ServedQPS != 0 || st.Plan.Epoch != first.Epoch+1 {
		t.Fatalf("no servers: step %+v, want a new plan hosting nothing, overloaded", st)
	}
	l.Published(st, o, now)
	if st := l.Next(now.Add(time.Second), o); st.Plan != nil {
		t.Fatal("shed again with nothing hosted")
	}
	o.Servers = 20
	if st := l.Next(now.Add(2*time.Second), o); !st.Replanned || st.Plan.Servers() == 0 {
		t.Fatal("no new allocation once the pipeline has workers again")
	}
}

// allocFunc is an allocator that returns what its function makes.
type allocFunc func() *plan.Plan

func (f allocFunc) Allocate(*pipeline.Spec, Observed) (*plan.Plan, error) { return f(), nil }
