package planner

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// twoTasks: a's profile says one sub-request for b per 10 items; the workers will count 10 per item.
const twoTasks = `
name: two
slo_ms: 1000
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 0.1},
         profile: [{batch: 1, p50_ms: 10, p95_ms: 12}]}
  - name: b
    variants:
      - {name: y, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 10, p95_ms: 12}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
  - {task: b, variant: y, replicas: 1, max_batch: 1}
`

// TestPlannerFillsTaskDemand: the planner estimates each task's demand from the sub-requests the workers' heartbeats
// count, so that Proteus, which plans each task from its own demand, runs live. The frontend reports 20 QPS; the
// heartbeats say a's items send b 10 sub-requests each (200 per second), where the profile says 0.1 (2 per second).
// On 6 workers, Proteus splits the servers by each task's work: b, with 10 times a's demand, gets 5 and a 1. With
// the profile's demand instead (no per-task demand), a would get 5 and b 1.
func TestPlannerFillsTaskDemand(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(twoTasks))
	if err != nil {
		t.Fatal(err)
	}
	runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, System: "proteus",
		DemandAlpha: 1, WorkerTimeout: 2 * time.Second, Config: control.Config{SolveTimeLimit: 5 * time.Second}})
	nc := s.Connect(t, "test") // plays the workers and the frontend
	ctx := t.Context()
	kv := testrig.Bucket(t, nc)

	// Six workers' heartbeats every 200 ms; w1 serves a/x and counts 4 items and 40 sub-requests for b a beat.
	started := time.Now()
	go func() {
		for beat := int64(1); ctx.Err() == nil; beat++ {
			for i := 1; i <= 6; i++ {
				id := fmt.Sprintf("w%d", i)
				reg := wire.Registration{ID: id, Started: started, Updated: time.Now(), Heartbeat: beat}
				if i == 1 {
					n := uint64(beat) * 4
					reg.Variant = "two:a/x"
					reg.Observed = map[string]wire.Observed{"two:a/x": {FanoutCounts: wire.FanoutCounts{Items: n,
						Children: map[string]uint64{"b": 10 * n}}}}
				}
				data, _ := json.Marshal(reg)
				kv.Put(ctx, wire.WorkerKey(id), data)
			}
			time.Sleep(200 * time.Millisecond) // the heartbeat period
		}
	}()
	reportDemand(ctx, nc, sp.Name, "f", 500*time.Millisecond, fixed(10)) // 20 QPS

	// The first plan on 6 servers may come before the heartbeats' counts have moved the estimate (on a loaded
	// machine it gave a 2 and b 4); the planner re-plans as the estimate moves.
	testrig.Eventually(t, 20*time.Second, "Proteus's plan on 6 servers to give a 1 server and b 5 (b's measured "+
		"demand is 10 times a's)", func() bool {
		pl, _ := readPlan(kv, sp.Name)
		replicas := map[string]int{}
		for _, v := range pl.Variants {
			replicas[v.Task] += v.Replicas
		}
		return pl.Allocation != nil && pl.Allocation.ClusterServers == 6 && replicas["a"] == 1 && replicas["b"] == 5
	})
}
