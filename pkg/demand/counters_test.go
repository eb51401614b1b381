package demand

import (
	"math"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func heartbeat(started time.Time, items, toB uint64) wire.Registration {
	return wire.Registration{Started: started, Observed: map[string]wire.Observed{"p:a/x": {
		FanoutCounts: wire.FanoutCounts{Items: items, Children: map[string]uint64{"b": toB}}, Messages: items}}}
}

// TestCountersFold: a worker's cumulative counters become what it counted since its previous heartbeat; a new or
// restarted worker, or a counter that went back, counts from zero, and no difference is negative.
func TestCountersFold(t *testing.T) {
	c := NewCounters()
	t0 := time.Unix(100, 0)
	for i, step := range []struct {
		id           string
		reg          wire.Registration
		items, toB   uint64
		what         string
		forgetBefore bool
	}{
		{id: "w1", reg: heartbeat(t0, 10, 30), items: 10, toB: 30, what: "first heartbeat: from zero"},
		{id: "w1", reg: heartbeat(t0, 15, 31), items: 5, toB: 1, what: "the difference"},
		{id: "w2", reg: heartbeat(t0, 7, 7), items: 7, toB: 7, what: "another worker: its own counters"},
		{id: "w1", reg: heartbeat(t0.Add(time.Second), 4, 2), items: 4, toB: 2, what: "restarted: from zero"},
		{id: "w1", reg: heartbeat(t0.Add(time.Second), 2, 9), items: 2, toB: 9, what: "items went back: from zero"},
		{id: "w1", reg: heartbeat(t0.Add(time.Second), 3, 1), items: 1, toB: 0, what: "a child count went back: none"},
		{id: "w1", reg: heartbeat(t0.Add(time.Second), 5, 4), items: 5, toB: 4, what: "forgotten: from zero",
			forgetBefore: true},
	} {
		if step.forgetBefore {
			c.Forget(step.id)
		}
		d := c.Fold(step.id, step.reg)["p:a/x"]
		if d.Items != step.items || d.Children["b"] != step.toB || d.Messages != step.items {
			t.Errorf("step %d (%s): %d items, %d to b; want %d and %d", i, step.what, d.Items, d.Children["b"],
				step.items, step.toB)
		}
	}
}

// TestTaskDemand: a task is estimated from its first count on, every tick after (a tick without items is no
// demand), at the count's rate; tasks not estimated are ignored, and a corrupt count does not wrap around.
func TestTaskDemand(t *testing.T) {
	d := NewTaskDemand([]string{"b", "c"}, func() *Estimator { return New(1, 0) })
	now := time.Unix(100, 0)
	if got := d.Tick(now, time.Second); len(got) != 0 {
		t.Fatalf("nothing counted, estimates %v", got)
	}
	d.Add("b", 30)
	d.Add("b", 20)
	d.Add("a", 1000) // not estimated
	got := d.Tick(now.Add(time.Second), time.Second)
	if len(got) != 1 || got["b"] != 50 {
		t.Fatalf("estimates %v, want b at 50", got)
	}
	if got = d.Tick(now.Add(2*time.Second), time.Second); got["b"] != 0 {
		t.Fatalf("a tick without items: b at %v, want 0", got["b"])
	}
	d.Add("c", math.MaxUint64)
	d.Add("c", math.MaxUint64)
	if got = d.Tick(now.Add(3*time.Second), time.Second); !(got["c"] > 0) {
		t.Fatalf("a corrupt count: c at %v", got["c"])
	}
}

// TestMessageSize: items per message from what the heartbeats counted since the previous ones, 1 before any, a
// heartbeat that counted no message ignored, and an average that follows a change within seconds.
func TestMessageSize(t *testing.T) {
	m := NewMessageSize(0.5)
	if got := m.Of("p:a/x"); got != 1 {
		t.Fatalf("nothing counted: %v items a message, want 1", got)
	}
	m.Observe("p:a/x", Delta{FanoutCounts: wire.FanoutCounts{Items: 40}, Messages: 10})
	m.Observe("p:a/x", Delta{FanoutCounts: wire.FanoutCounts{Items: 40}, Messages: 0}) // no message: ignored
	m.Tick()
	if got := m.Of("p:a/x"); got != 4 {
		t.Fatalf("40 items in 10 messages: %v a message, want 4", got)
	}
	for range 10 {
		m.Observe("p:a/x", Delta{FanoutCounts: wire.FanoutCounts{Items: 20}, Messages: 10})
		m.Tick()
	}
	if got := m.Of("p:a/x"); got > 2.01 {
		t.Fatalf("10 ticks of 2 items a message: %v a message, want 2", got)
	}
	m.Tick() // a tick without counts keeps the average
	if got := m.Of("p:a/x"); got > 2.01 || got < 1.99 {
		t.Fatalf("a tick without counts moved the average to %v", got)
	}
}
