package planner

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

const spec = `
name: pl
slo_ms: 1000
tasks:
  - name: a
    variants:
      - name: x
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]
allocation:
  - {task: a, variant: x, replicas: 2, max_batch: 1}
`

type runningWorker struct {
	w      *worker.Worker
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

func startWorker(t *testing.T, s *server.Server, id string) *runningWorker {
	nc, err := bus.ConnectInProcess(s, id)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(nc, worker.Config{ID: id, RegisterEvery: 100 * time.Millisecond, FetchWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(rw.done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-rw.done; nc.Close() })
	return rw
}

func serving(ws map[string]*runningWorker) map[string]bool {
	out := map[string]bool{}
	for id, w := range ws {
		if w.w.Serving() != "" {
			out[id] = true
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// TestPlannerAssignsLiveWorkers: the plan's replicas go to registered workers, the rest stay idle; a worker that
// stops (deregistering) or dies (its registration goes stale) is replaced by an idle one, and the plan and spec are
// in the bucket with an epoch that survives a planner restart.
func TestPlannerAssignsLiveWorkers(t *testing.T) {
	s, err := bus.StartServer(bus.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	sp, err := pipeline.Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	runPlanner := func() context.CancelFunc {
		nc, err := bus.ConnectInProcess(s, "planner")
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(nc, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, WorkerTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.Run(ctx) }()
		return func() { cancel(); <-done; nc.Close() }
	}
	stopPlanner := runPlanner()
	defer func() { stopPlanner() }()

	ws := map[string]*runningWorker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		ws[id] = startWorker(t, s, id)
	}
	waitFor(t, "2 of 3 workers serve", func() bool { return len(serving(ws)) == 2 })
	time.Sleep(300 * time.Millisecond)
	if n := len(serving(ws)); n != 2 {
		t.Fatalf("%d workers serve a plan of 2 replicas", n)
	}

	// A worker that stops deregisters: the idle one takes over.
	var stopped string
	for id := range serving(ws) {
		stopped = id
		break
	}
	ws[stopped].cancel()
	<-ws[stopped].done
	delete(ws, stopped)
	waitFor(t, "the idle worker replaces the stopped one", func() bool { return len(serving(ws)) == 2 })

	// A worker that dies (no deregistration: its connection is cut) is replaced once its registration is stale.
	ws["w4"] = startWorker(t, s, "w4")
	var died string
	for id := range serving(ws) {
		died = id
		break
	}
	ws[died].nc.Close()
	delete(ws, died)
	waitFor(t, "w4 replaces the dead worker", func() bool { return ws["w4"].w.Serving() != "" })

	// The bucket holds the spec and the plan; a restarted planner continues the epoch and moves no one.
	nc, _ := bus.ConnectInProcess(s, "check")
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, _ := bus.OpenBucket(context.Background(), js, jetstream.MemoryStorage)
	epoch := func() uint64 {
		e, err := kv.Get(context.Background(), wire.PlanKey("pl"))
		if err != nil {
			t.Fatal(err)
		}
		var p plan.Plan
		json.Unmarshal(e.Value(), &p)
		return p.Epoch
	}
	if _, err := kv.Get(context.Background(), wire.SpecKey("pl")); err != nil {
		t.Errorf("spec not in the bucket: %v", err)
	}
	before := serving(ws)
	e1 := epoch()
	stopPlanner()
	stopPlanner = runPlanner()
	waitFor(t, "the new planner publishes", func() bool { return epoch() == e1+1 })
	time.Sleep(500 * time.Millisecond)
	after := serving(ws)
	for id := range before {
		if !after[id] {
			t.Errorf("planner restart moved worker %s", id)
		}
	}
}
