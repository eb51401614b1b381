package hop

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// queueDepths is a reading of the queues: the items at each variant, and the reading's number.
type queueDepths struct {
	d map[string]float64
	n uint64
}

func (q *queueDepths) Depth(_, variant string) (float64, bool) {
	d, ok := q.d[variant]
	return d, ok
}

func (q *queueDepths) Reading() uint64 { return q.n }

// queueTable is the table of TestQueueAwareStep: every car to c1 by the tables, the choice by queue reading q.
func queueTable(t *testing.T, q routing.Queues) *Table {
	t.Helper()
	tb, spec := table(t, 1, false)
	spec.RoutingMode = routing.ModeQueue
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.Routing = plan.Routing{Root: []plan.Route{{Variant: "d", Prob: 1}},
		Downstream: map[string]map[string][]plan.Route{"det/d": {"car": {{Variant: "c1", Prob: 1}},
			"face": {{Variant: "f1", Prob: 1}}}}}
	qt := NewTable(spec, p, tb.Stage, "det", "d", spec.Task("det").Children)
	qt.Queues = q
	return qt
}

// carsTo steps an item of cars cars with 30 ms left and counts where they went.
func carsTo(t *testing.T, st *Stepper, tab *Table, cars int) map[string]int {
	t.Helper()
	w := When{Now: time.Unix(100, 0).UnixNano(), AtTask: 5 * time.Millisecond, Left: 30 * time.Millisecond}
	out, err := st.Step(tab, Item{Den: 1, Children: children(cars, 0)}, w, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range out.Messages {
		got[m.Variant] += len(m.Subs)
	}
	return got
}

// TestQueueAwareBatch: the items of a batch are stepped one after the other on one reading of the queues, which
// holds none of what they send. c1 takes 5 more cars (TestQueueAwareStep): the first item's 4, then 1 of the
// second's, the other 3 to c2; counted per item alone, the second item's 4 all joined c1 too (herding). A new
// reading holds what was sent: counting starts afresh.
func TestQueueAwareBatch(t *testing.T) {
	q := &queueDepths{d: map[string]float64{"c1": 31, "c2": 0, "f1": 0}, n: 7}
	tab := queueTable(t, q)
	var st Stepper
	if got := carsTo(t, &st, tab, 4); got["c1"] != 4 {
		t.Fatalf("first item: %v, want its 4 cars to c1", got)
	}
	if got := carsTo(t, &st, tab, 4); got["c1"] != 1 || got["c2"] != 3 {
		t.Errorf("second item on the same reading: %v, want 1 car to c1 and 3 to c2", got)
	}
	q.d["c1"], q.n = 31, 8 // read again: c1 served what the batch sent
	if got := carsTo(t, &st, tab, 4); got["c1"] != 4 {
		t.Errorf("after a new reading: %v, want 4 cars to c1", got)
	}
}

// TestQueueAwareStep: with routing_mode queue, the table sends every car to c1, whose 4 replicas have 31 cars
// queued; with 30 ms left (15 ms for the completion), c1 takes a car while a full round (11 ms) and the car's own
// batch fit: 5 more, counting those this step sent it (the queue does not hold them yet), the other 3 go to c2.
// Without the queues' state, the tables route them all to c1.
func TestQueueAwareStep(t *testing.T) {
	tb, _ := table(t, 1, false)
	q := queueTable(t, nil)
	if got := carsTo(t, new(Stepper), q, 8); got["c1"] != 8 {
		t.Errorf("without the queues' state: %v, want the tables' 8 cars to c1", got)
	}
	q.Queues = &queueDepths{d: map[string]float64{"c1": 31, "c2": 0, "f1": 0}}
	if got := carsTo(t, new(Stepper), q, 8); got["c1"] != 5 || got["c2"] != 3 {
		t.Errorf("queue-aware: %v, want 5 cars to c1 and 3 to c2", got)
	}
	if tb.Stage.Policy != deadline.None {
		t.Fatalf("the table's stage has policy %s, want none (no deadline decisions in the way)", tb.Stage.Policy)
	}
}
