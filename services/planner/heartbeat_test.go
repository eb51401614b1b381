package planner

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestHeartbeatDelayObserved: the planner's heartbeat delay histogram counts the heartbeats it handles as they
// come, from the time they reached the bucket; a registration already in the bucket when it starts (a second old
// here) is read, not late, and is not counted.
func TestHeartbeatDelayObserved(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := bus.OpenBucket(ctx, testrig.JetStream(t, s.Connect(t, "setup")), jetstream.MemoryStorage, 1)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old, _ := json.Marshal(wire.Registration{ID: "old", Started: now, Updated: now, Heartbeat: 1})
	if _, err := kv.Put(ctx, wire.WorkerKey("old"), old); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)

	reg := prometheus.NewRegistry()
	p, _ := runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage,
		WorkerTimeout: 5 * time.Second, System: "static", Metrics: reg, Logger: quiet})
	waitFor(t, "the planner read the registrations in the bucket", p.workersReady.Load)
	delays := func() (count uint64, sum float64) {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sleipnir_planner_heartbeat_delay_seconds" {
				h := mf.GetMetric()[0].GetHistogram()
				return h.GetSampleCount(), h.GetSampleSum()
			}
		}
		return 0, 0
	}
	if n, sum := delays(); n != 0 {
		t.Fatalf("%d heartbeats counted (%.3f s in all) before any worker beat: the bucket's replay counted", n, sum)
	}

	startWorker(t, s, "w1") // beats every 100 ms
	waitFor(t, "5 heartbeats counted", func() bool { n, _ := delays(); return n >= 5 })
	if n, sum := delays(); sum/float64(n) >= 1 {
		t.Fatalf("mean heartbeat delay %.3f s over %d heartbeats, want the time since each reached the bucket",
			sum/float64(n), n)
	}
}
