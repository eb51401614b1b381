package planner

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

const measuredLatency = `
name: lat
slo_ms: 100
tasks:
  - name: a
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 10, p95_ms: 12}]}
      - {name: y, accuracy: 0.8, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 2, p95_ms: 3}]}
`

// TestPlannerPlansWithMeasuredLatencies: a worker's heartbeat says the accurate variant x runs at 6 times its
// profile, beyond the SLO's budget; the planner plans with that (the fast variant y, the blended profile in the plan), and
// when that worker leaves, its measurements are forgotten and x is planned again on its profile.
func TestPlannerPlansWithMeasuredLatencies(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(measuredLatency))
	if err != nil {
		t.Fatal(err)
	}
	runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, DemandAlpha: 1,
		WorkerTimeout: 2 * time.Second, Config: control.Config{Headroom: -1, SolveWorkers: 1}})
	startWorker(t, s, "w1")
	startWorker(t, s, "w2")
	nc := s.Connect(t, "frontend")
	ctx := t.Context()
	kv := testrig.Bucket(t, nc)
	current := func() plan.Plan {
		pl, _ := readPlan(kv, sp.Name)
		return pl
	}
	reportDemand(ctx, nc, sp.Name, "f", 500*time.Millisecond, func() int { return 5 })
	hosts := func(variant string) bool {
		p := current()
		return p.Allocation != nil && p.Hosts("a", variant) && len(p.Variants) == 1
	}
	waitFor(t, "a plan on x", func() bool { return hosts("x") && len(current().Profiles) == 0 })

	started := time.Now()
	stop := make(chan struct{})
	meterGone := make(chan struct{})
	go func() { // the meter's heartbeat: x measured at 6 times its p95 over 1000 batches
		defer close(meterGone)
		for beat := int64(1); ; beat++ {
			reg, _ := json.Marshal(wire.Registration{ID: "meter", Started: started, Updated: time.Now(), Heartbeat: beat,
				Observed: map[string]wire.Observed{"lat:a/x": {Latency: []wire.BatchLatency{
					{Batch: 1, Count: 1000, P50Ms: 60, P95Ms: 72}}}}})
			kv.Put(ctx, wire.WorkerKey("meter"), reg)
			select {
			case <-stop:
				kv.Delete(ctx, wire.WorkerKey("meter"))
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	waitFor(t, "a plan on y for the measured x", func() bool { return hosts("y") })
	p := current()
	if x := p.Profiles["a/x"]; len(x) != 1 || x[0].P50Ms < 55 || x[0].P50Ms > 60 {
		t.Fatalf("the plan's profile of x: %+v, want about 6 x 10 ms (the profile's weight is small)", x)
	}
	close(stop)
	<-meterGone
	waitFor(t, "x planned again on its profile once the meter left", func() bool {
		return hosts("x") && len(current().Profiles) == 0
	})
}
