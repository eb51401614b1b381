package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestQueueViewHoldsWhatIsOnItsWay: the queue a queue-aware choice reads holds a message from the moment it is sent,
// as a live stream counts a publish once stored, not a hop later when the simulator delivers it: otherwise every
// item of a batch, stepped at one instant, saw the queue without its batch-mates' sub-requests and joined it (on
// Gamma arrivals at 900 QPS, half again the tables' violations; docs/queue-routing.md). The reading changes with
// each message sent, so that the hop step does not count it twice.
func TestQueueViewHoldsWhatIsOnItsWay(t *testing.T) {
	spec := traffic(t)
	spec.RoutingMode = routing.ModeQueue
	s, err := newSim(Config{Spec: spec, Workload: workload.Constant(100, time.Second), Servers: 20,
		System: "loki", Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := s.pipes[0]
	q := queueView{s, p}
	depth := func() float64 {
		t.Helper()
		d, ok := q.Depth("classify_car", "effnet_b7")
		if !ok {
			t.Fatal("effnet_b7's queue is not known")
		}
		return d
	}
	before, reading := depth(), q.Reading()
	s.events, p.sent = eventHeap{}, deliveries{}
	r := &request{pipe: p, due: int64(time.Minute)}
	s.send(p, p.queueIdx["classify_car"]["effnet_b7"], r, 3, 1, 0)
	if got := depth(); got != before+3 {
		t.Errorf("with a message of 3 on its way: depth %v, want %v", got, before+3)
	}
	if q.Reading() == reading {
		t.Error("the reading did not change with a message sent")
	}
	e, _ := s.next()
	s.handle(e)
	if got := depth(); got != before+3 {
		t.Errorf("delivered: depth %v, want %v (counted once)", got, before+3)
	}
}
