package deadline

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestDegradeAnswersWhatRerouteDrops: degrade routes as reroute does (the chosen variant while the item has time for
// it, a backup while one fits); the sub-request reroute drops for want of a faster variant is marked to be answered
// with its parent's result, and before a task the items reroute drops for being late are answered, those past
// their deadline (or without a result: the root) are not.
func TestDegradeAnswersWhatRerouteDrops(t *testing.T) {
	spec := chainSpec(t)
	routes := []plan.Route{{Variant: "slow", Prob: 1}}
	for _, left := range []time.Duration{400 * ms, 200 * ms, 10 * ms} {
		r := NewStage(spec, chainPlan(true), Reroute, "a", "x", 100*ms, 1).Route("b", routes, t0, 0, left, 0.5, 0.5)
		d := NewStage(spec, chainPlan(true), Degrade, "a", "x", 100*ms, 1).Route("b", routes, t0, 0, left, 0.5, 0.5)
		if d.Variant != r.Variant || d.Reason != r.Reason || d.Rerouted != r.Rerouted {
			t.Errorf("left %v: degrade %+v, reroute %+v: want the same route", left, d, r)
		}
		if r.Degraded || d.Degraded != (r.Variant == "") {
			t.Errorf("left %v: degrade %+v, reroute %+v: want degraded exactly where reroute drops", left, d, r)
		}
	}
	if d := NewStage(spec, chainPlan(true), Degrade, "a", "x", 100*ms, 1).Route("b", routes, t0, 0, 10*ms, 0.5,
		0.5); d.Variant != "" || d.Reason != wire.DropNoFaster || !d.Degraded {
		t.Errorf("10 ms left: %+v, want answered degraded (no-faster-variant)", d)
	}
	for _, tc := range []struct {
		policy Policy
		reason string
		want   bool
	}{
		{Degrade, wire.DropLastTask, true},
		{Degrade, wire.DropNoFaster, true},
		{Degrade, wire.DropDeadline, false},
		{Degrade, wire.DropUnrouted, false},
		{Reroute, wire.DropNoFaster, false},
		{Reroute, wire.DropLastTask, false},
	} {
		if got := Answers(tc.policy, tc.reason); got != tc.want {
			t.Errorf("Answers(%s, %s) = %v, want %v", tc.policy, tc.reason, got, tc.want)
		}
	}
	// Before executing, degrade drops what reroute drops (the caller answers it).
	c := NewStage(spec, chainPlan(false), Degrade, "c", "y", 50*ms, 1)
	if got := c.BeforeExecute(t0, t0+int64(40*ms), t0, 1, 0); got != wire.DropLastTask {
		t.Errorf("40 ms left at the last task: %q, want %q", got, wire.DropLastTask)
	}
	if p, err := ParsePolicy("degrade"); err != nil || p != Degrade {
		t.Errorf("ParsePolicy(degrade) = %q, %v", p, err)
	}
}
