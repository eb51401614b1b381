package control

import (
	"errors"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestShedOnTooFewServers: a share of the servers that cannot host the pipeline at all (traffic's 3 tasks on 2, as
// an even split or the division's fallback to one gives it) sheds it when the plan in force does not fit the share:
// a plan that hosts nothing, valid, rather than the plan before, whose replicas have no workers. Given servers
// again, it is planned on them.
func TestShedOnTooFewServers(t *testing.T) {
	spec := trafficSpec(t)
	static, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	static.Epoch = 1
	l := New(spec, Config{}, MILP{Utilization: 0.85}, static)
	t0 := time.Unix(1000, 0)
	o := Observed{Demand: 5, Servers: 2}
	st := l.Next(t0, o)
	if st.Plan == nil || !st.Plan.HostsNothing() || !st.Replanned || !errors.Is(st.Err, ErrCannotServe) {
		t.Fatalf("on 2 servers: %+v, want a plan that hosts nothing, with the allocator's error", st)
	}
	if err := st.Plan.Validate(spec); err != nil {
		t.Fatalf("the plan that hosts nothing: %v", err)
	}
	l.Published(st, o, t0)
	if st := l.Next(t0.Add(time.Second), o); st.Plan != nil {
		t.Fatalf("the next tick on the same 2 servers published again (%d servers)", st.Plan.Servers())
	}
	o.Servers = 4
	st = l.Next(t0.Add(2*time.Second), o)
	if st.Plan == nil || st.Plan.HostsNothing() || st.Plan.Servers() > 4 {
		t.Fatalf("on 4 servers: %+v, want a plan on them", st)
	}
}
