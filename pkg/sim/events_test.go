package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestDeliveriesKeepTheEventOrder: the events come out in the order of their times, then of their pushes, whether
// they wait in the heap or in a pipeline's deliveries (two pipelines, different hop latencies, events pushed and
// taken in turn as the simulation does).
func TestDeliveriesKeepTheEventOrder(t *testing.T) {
	camera, err := pipeline.Load("../../examples/traffic-camera.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := workload.Constant(1, time.Second)
	s, err := newSim(Config{Pipelines: []Served{{Spec: traffic(t), Workload: w}, {Spec: camera, Workload: w}},
		Servers: 2, Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.events = eventHeap{}
	s.pipes[1].comm = 3 * s.pipes[0].comm
	rng := rand.New(rand.NewPCG(1, 2))
	pushed, taken := 0, 0
	var last event
	take := func() {
		e, ok := s.next()
		if !ok {
			t.Fatal("no event left")
		}
		if taken > 0 && less(&e, &last) {
			t.Fatalf("event %+v taken after %+v", e, last)
		}
		last = e
		taken++
	}
	for range 20000 {
		switch rng.IntN(4) {
		case 0: // a batch or a tick, in the heap
			s.push(event{at: s.now + rng.Int64N(int64(5*time.Millisecond)), kind: evBatchDone})
		case 1: // a message sent (send)
			p := s.pipes[rng.IntN(2)]
			s.seq++
			p.sent.push(event{at: s.now + p.comm, seq: s.seq, kind: evDeliver})
		default:
			if pushed > taken {
				take()
			}
			continue
		}
		pushed++
	}
	for pushed > taken {
		take()
	}
	if _, ok := s.next(); ok {
		t.Fatal("an event left after all were taken")
	}
}
