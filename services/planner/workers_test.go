package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sleipnir-serving/sleipnir/internal/onnxgen"
	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// perWorker counts the entries the planner keeps per worker id, over every map it keeps of them (liveness,
// heartbeat counters, latency reports, registration revisions, failures, registrations still to delete,
// assignments, and what it wrote and saw rewritten under assign.<worker>).
func (p *Planner) perWorker() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	counted, measured := p.core.Workers()
	n := p.live.Known() + counted + measured + len(p.revision) + len(p.failing) + len(p.expired) + len(p.assign)
	for _, keys := range []map[string]bool{keySet(p.written), p.tampered} {
		for key := range keys {
			if _, ok := wire.AssignKeys.Name(key); ok {
				n++
			}
		}
	}
	return n
}

func keySet[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// gone says key is not in the bucket.
func gone(kv jetstream.KeyValue, key string) bool {
	_, err := kv.Get(context.Background(), key)
	return errors.Is(err, jetstream.ErrKeyNotFound)
}

// TestPlannerForgetsGoneWorkers: 3 rounds of 30 workers register (heartbeats with measurements, some saying they
// cannot serve), are assigned, and die without deregistering, or deregister; after each round the planner keeps
// per worker what it kept before the round (one real worker stays throughout, so that the silence is the workers',
// not the bus's), and neither their registrations nor their assignments are left in the bucket.
func TestPlannerForgetsGoneWorkers(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	// 2 s: on a busy machine a second's stall of every heartbeat at once is the bus to the planner (control.Liveness),
	// and holds the dead live too.
	p, _ := runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage,
		WorkerTimeout: 2 * time.Second, System: "static", Logger: quiet})
	stays := startWorker(t, s, "stays")
	waitFor(t, "the staying worker serves", func() bool { return stays.w.Serving() != "" })
	base := p.perWorker()

	kv := testrig.Bucket(t, s.Connect(t, "workers"))
	ctx := t.Context()
	for round := range 3 {
		ids := make([]string, 30)
		for i := range ids {
			ids[i] = fmt.Sprintf("r%d-w%02d", round, i)
		}
		// They beat every 200 ms until the planner has assigned every one of them.
		started := time.Now()
		assigned := func() bool {
			for _, id := range ids {
				if gone(kv, wire.AssignKey(id)) {
					return false
				}
			}
			return true
		}
		for beat := int64(1); beat < 3 || !assigned(); beat++ {
			if time.Since(started) > 30*time.Second {
				t.Fatalf("round %d: the planner did not assign its 30 workers in 30 s", round)
			}
			for i, id := range ids {
				reg := wire.Registration{ID: id, Started: started, Updated: time.Now(), Heartbeat: beat,
					Observed: map[string]wire.Observed{"pl:a/x": {FanoutCounts: wire.FanoutCounts{Items: uint64(beat)},
						Latency: []wire.BatchLatency{{Batch: 1, Count: 30, P50Ms: 5, P95Ms: 6}}}}}
				if i%3 == 0 {
					reg.Failing = &wire.AssignmentFailure{Variant: "pl:a/x", Reason: "no model", Since: started,
						Attempts: int(beat)}
				}
				data, _ := json.Marshal(reg)
				if _, err := kv.Put(ctx, wire.WorkerKey(id), data); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		if n := p.perWorker(); n <= base {
			t.Fatalf("round %d: %d entries per worker with 31 workers, %d with one", round, n, base)
		}
		for _, id := range ids[:5] { // these deregister; the others die
			if err := kv.Delete(ctx, wire.WorkerKey(id)); err != nil {
				t.Fatal(err)
			}
		}
		var kept int
		var left []string
		if err := testrig.WaitFor(45*time.Second, fmt.Sprintf("round %d: the planner keeps per worker what it did "+
			"before the round, and the bucket holds no key of its workers", round), func() bool {
			kept, left = p.perWorker(), nil
			for _, id := range ids {
				for _, key := range []string{wire.WorkerKey(id), wire.AssignKey(id)} {
					if !gone(kv, key) {
						left = append(left, key)
					}
				}
			}
			return kept == base && len(left) == 0
		}); err != nil {
			t.Fatalf("%v: %d entries per worker (%d before), keys left %v", err, kept, base, left)
		}
		if stays.w.Serving() == "" || gone(kv, wire.WorkerKey("stays")) {
			t.Fatalf("round %d: the staying worker lost its assignment or its registration", round)
		}
	}
}

// TestPlannerDeletesDeadWorkersRegistration: a worker whose connection is cut without deregistering (what SIGKILL
// leaves) is out of the plan, and its registration and assignment are gone from the bucket, within a few
// WorkerTimeouts; another worker serves.
func TestPlannerDeletesDeadWorkersRegistration(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(milpSpec))
	if err != nil {
		t.Fatal(err)
	}
	runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage,
		WorkerTimeout: 2 * time.Second, Logger: quiet})
	ws := map[string]*runningWorker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		ws[id] = startWorker(t, s, id)
	}
	reportDemand(t.Context(), s.Connect(t, "frontend"), sp.Name, "f", 500*time.Millisecond, fixed(5))
	kv := testrig.Bucket(t, s.Connect(t, "reader"))
	clusterServers := func() int {
		pl, ok := readPlan(kv, sp.Name)
		if !ok || pl.Allocation == nil {
			return -1
		}
		return pl.Allocation.ClusterServers
	}
	waitLong(t, "a plan on 3 workers, served", func() bool { return clusterServers() == 3 && len(serving(ws)) > 0 })
	var dead string
	for id := range serving(ws) {
		dead = id
		break
	}
	ws[dead].nc.Close() // no deregistration: the worker's shutdown path cannot reach the bus
	delete(ws, dead)
	killed := time.Now()
	waitLong(t, "the dead worker's registration and assignment are deleted, and the plan counts 2 workers, served",
		func() bool {
			return gone(kv, wire.WorkerKey(dead)) && gone(kv, wire.AssignKey(dead)) && clusterServers() == 2 &&
				len(serving(ws)) > 0
		})
	t.Logf("%s's registration deleted and the plan on 2 workers %v after its connection was cut (WorkerTimeout 2 s)",
		dead, time.Since(killed).Round(time.Millisecond))
}

// mlpSpec is one task served by an ONNX model (mlp.onnx in the workers' models directory).
const mlpSpec = `
name: mlp
slo_ms: 2000
batch_sizes: [1]
tasks:
  - name: score
    variants:
      - name: mlp
        accuracy: 1
        executor: {kind: onnx, model: mlp.onnx}
        profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]
`

// TestPlannerPlansWithoutAFailingWorker: a worker assigned a variant whose model file is missing from its models
// directory (the real ONNX executor fails to open it) says so in its heartbeat; the planner leaves it out of the
// plan (2 cluster servers of 3, the failing-workers gauge at 1) and gives the replica to another worker, and the
// pipeline serves. Once the model file appears, the worker's retry loads it and the plan counts it again.
func TestPlannerPlansWithoutAFailingWorker(t *testing.T) {
	onnxtest.Runtime(t)
	model, err := onnxgen.MLP{In: 8, Width: 16, Depth: 2, Out: 3, Seed: 5}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	good, broken := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(good, "mlp.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(mlpSpec))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage,
		WorkerTimeout: 2 * time.Second, Metrics: reg, Logger: quiet})
	fe, err := frontend.New(s.Connect(t, "frontend"), frontend.Config{ID: "fe1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "frontend", fe.Run)
	start := func(id, models string) *runningWorker {
		return runWorker(t, s.Connect(t, id), worker.Config{ID: id, RegisterEvery: 100 * time.Millisecond,
			FetchWait: 100 * time.Millisecond, ModelsDir: models, Logger: quiet})
	}
	kv := testrig.Bucket(t, s.Connect(t, "reader"))
	heartbeat := func(id string) wire.Registration {
		var r wire.Registration
		if e, err := kv.Get(context.Background(), wire.WorkerKey(id)); err == nil {
			json.Unmarshal(e.Value(), &r)
		}
		return r
	}
	clusterServers := func() int {
		pl, ok := readPlan(kv, sp.Name)
		if !ok || pl.Allocation == nil {
			return -1
		}
		return pl.Allocation.ClusterServers
	}
	failingGauge := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sleipnir_planner_failing_workers" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}

	// The broken worker comes first and alone: it is assigned the variant, and cannot load it.
	b := start("broken", broken)
	waitLong(t, "the broken worker says it cannot serve mlp", func() bool {
		f := heartbeat("broken").Failing
		return f != nil && f.Variant == "mlp:score/mlp" && f.Reason != ""
	})
	ws := map[string]*runningWorker{"w1": start("w1", good), "w2": start("w2", good)}
	waitLong(t, "a plan on the 2 able workers, one of them serving, the gauge at 1", func() bool {
		return clusterServers() == 2 && len(serving(ws)) > 0 && failingGauge() == 1
	})
	if b.w.Serving() != "" || b.w.Failing() == nil {
		t.Fatalf("the broken worker serves %q, failing %+v", b.w.Serving(), b.w.Failing())
	}
	client := s.Connect(t, "client")
	for i := range 5 {
		req, _ := json.Marshal(wire.InferRequest{Inputs: []wire.Tensor{wire.NewFP32("x", []int64{8},
			make([]float32, 8))}})
		m, err := client.Request(wire.InferSubject(sp.Name), req, 10*time.Second)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var rep wire.InferReply
		if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Status != wire.StatusOK {
			t.Fatalf("request %d: reply %s (%v), want ok", i, m.Data, err)
		}
	}

	// The model appears: the broken worker's next retry loads it, and the plan counts it again.
	if err := os.WriteFile(filepath.Join(broken, "mlp.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "the worker serves once its model is there, and the plan counts 3 workers", func() bool {
		return heartbeat("broken").Failing == nil && b.w.Failing() == nil && clusterServers() == 3 &&
			failingGauge() == 0
	})
}
