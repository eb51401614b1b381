package hop

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

type queueDepths map[string]float64

func (q queueDepths) Depth(_, variant string) (float64, bool) {
	d, ok := q[variant]
	return d, ok
}

// TestQueueAwareStep: with routing_mode queue, the table sends every car to c1, whose 4 replicas have 31 cars
// queued; with 30 ms left (15 ms for the completion), c1 takes a car while a full round (11 ms) and the car's own
// batch fit: 5 more, counting those this step sent it (the queue does not hold them yet), the other 3 go to c2.
// Without the queues' state, the tables route them all to c1.
func TestQueueAwareStep(t *testing.T) {
	tb, spec := table(t, 1, false)
	spec.RoutingMode = routing.ModeQueue
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.Routing = plan.Routing{Root: []plan.Route{{Variant: "d", Prob: 1}},
		Downstream: map[string]map[string][]plan.Route{"det/d": {"car": {{Variant: "c1", Prob: 1}},
			"face": {{Variant: "f1", Prob: 1}}}}}
	q := NewTable(spec, p, tb.Stage, "det", "d", spec.Task("det").Children)
	w := When{Now: time.Unix(100, 0), AtTask: 5 * time.Millisecond, Left: 30 * time.Millisecond}
	count := func(tab *Table) map[string]int {
		var st Stepper
		out, err := st.Step(tab, Item{Den: 1, Children: children(8, 0)}, w, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, m := range out.Messages {
			got[m.Variant] += len(m.Subs)
		}
		return got
	}
	if got := count(q); got["c1"] != 8 {
		t.Errorf("without the queues' state: %v, want the tables' 8 cars to c1", got)
	}
	q.Queues = queueDepths{"c1": 31, "c2": 0, "f1": 0}
	if got := count(q); got["c1"] != 5 || got["c2"] != 3 {
		t.Errorf("queue-aware: %v, want 5 cars to c1 and 3 to c2", got)
	}
	if tb.Stage.Policy != deadline.None {
		t.Fatalf("the table's stage has policy %s, want none (no deadline decisions in the way)", tb.Stage.Policy)
	}
}
