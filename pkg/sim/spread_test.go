package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestParentSpreadOverReplicas: as the live worker's test of the same name, in the simulator: one parent with 24
// sub-requests for a variant of max batch 8 with 3 free replicas (messages of 8) or 4 (of 6, which run faster)
// finishes in about one batch latency, where in one message it took three, one after the other.
func TestParentSpreadOverReplicas(t *testing.T) {
	for _, replicas := range []int{3, 4} {
		t.Run(fmt.Sprint(replicas, " replicas"), func(t *testing.T) {
			spec, err := pipeline.Load("../hop/testdata/fan.yaml")
			if err != nil {
				t.Fatal(err)
			}
			spec.Allocation[1].Replicas = replicas
			s, err := newSim(Config{Spec: spec, Workload: workload.Constant(1, time.Second), Servers: 1 + replicas,
				System: "static", Seed: 1, CommLatency: -1})
			if err != nil {
				t.Fatal(err)
			}
			// One request, on the static plan's servers at rest: no other arrival, no tick.
			s.events = eventHeap{}
			r := &request{pipe: s.pipes[0], due: int64(time.Minute), pending: 1}
			s.inFlight++
			s.push(event{kind: evDeliver, target: s.pipes[0].queueIdx["det"]["d"], msg: s.ref(&message{req: r, items: 1, den: 1})})
			s.run()
			if s.inFlight != 0 || r.ok != 24 || r.dropped != 0 {
				t.Fatalf("request %+v: want it answered, its 24 leaves ok", r)
			}
			took := time.Duration(r.replied - r.arrival)
			batch := time.Duration(spec.Variant("cls", "c").LatencyFor(8).P50Ms * float64(time.Millisecond))
			t.Logf("24 sub-requests, max batch 8, %d replicas: the parent took %v; one batch of 8 takes %v",
				replicas, took, batch)
			if took > batch*16/10 {
				t.Errorf("the parent took %v, over 1.6 times one batch latency (%v): its sub-requests did not "+
					"spread over the replicas", took, batch)
			}
		})
	}
}
