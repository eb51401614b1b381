package demand

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestEscalationEstimator: the rate is reported once enough items were seen, follows the intervals' counts by the
// moving average, and an interval without items leaves it.
func TestEscalationEstimator(t *testing.T) {
	e := NewEscalationEstimator(0.5, 20)
	e.Observe("t/a", 10, 5)
	e.Tick()
	if _, ok := e.Rate("t/a"); ok {
		t.Error("a rate from 10 items, want none before 20")
	}
	e.Observe("t/a", 30, 3)
	e.Tick()
	// items 0.5*30 + 0.5*10 = 20, escalated 0.5*3 + 0.5*5 = 4.
	if r, ok := e.Rate("t/a"); !ok || math.Abs(r-0.2) > 1e-12 {
		t.Errorf("rate %v (%v), want 0.2", r, ok)
	}
	e.Tick()
	if r, _ := e.Rate("t/a"); math.Abs(r-0.2) > 1e-12 {
		t.Errorf("after an empty interval: %v, want 0.2 still", r)
	}
	if _, ok := e.Rate("t/b"); ok {
		t.Error("a rate for a variant never seen")
	}
}

// TestCountersFoldEscalated: the escalated items of a heartbeat are folded into what is new since the previous one.
func TestCountersFoldEscalated(t *testing.T) {
	c := NewCounters()
	beat := func(items, escalated uint64) wire.Registration {
		return wire.Registration{ID: "w", Observed: map[string]wire.Observed{"p:t/a": {
			FanoutCounts: wire.FanoutCounts{Items: items, Escalated: escalated}}}}
	}
	c.Fold("w", beat(10, 4))
	if d := c.Fold("w", beat(25, 9))["p:t/a"]; d.Items != 15 || d.Escalated != 5 {
		t.Errorf("delta %+v, want 15 items, 5 escalated", d)
	}
}
