package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestItemPathAllocatesNothing: once warm, the per-item path (arrivals, deliveries, batches, the hop step and the
// replies) allocates nothing: messages and requests are reused, events hold no pointer, scratch is kept. Measured
// over the stretches of per-item events between the planner's ticks and the tuner's looks (which allocate), as
// bytes per item-hop; before the reuse it was over 100.
func TestItemPathAllocatesNothing(t *testing.T) {
	s, err := newSim(Config{Spec: traffic(t), Workload: workload.Constant(300, time.Minute), Servers: 20,
		System: "loki", Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	perItem := func(e event) bool { return e.kind != evTick && e.kind != evTune }
	next := func() event {
		e, _ := s.next()
		return e
	}
	for s.now < int64(30*time.Second) { // warm: queues, pools and windows at their steady sizes
		s.handle(next())
	}
	hops0 := s.pipes[0].hopsDone
	var bytes uint64
	for s.now < int64(55*time.Second) {
		e := next()
		if !perItem(e) {
			s.handle(e)
			continue
		}
		bytes += alloctest.Bytes(func() {
			for {
				s.handle(e)
				if first, _ := s.peek(); first == nil || !perItem(*first) {
					return
				}
				e = next()
			}
		})
	}
	hops := s.pipes[0].hopsDone - hops0
	t.Logf("%d item-hops: %d bytes allocated on the per-item path (%.3f per hop)", hops, bytes,
		float64(bytes)/float64(hops))
	if hops < 10000 || float64(bytes)/float64(hops) > 2 {
		t.Fatalf("%d bytes over %d item-hops: want under 2 a hop", bytes, hops)
	}
}
