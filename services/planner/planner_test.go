package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
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
	w    *worker.Worker
	nc   *nats.Conn
	stop func() // returns once the worker has stopped
}

// startWorker runs a worker on the embedded server s, registering every 100 ms.
func startWorker(t *testing.T, s *testrig.Embedded, id string) *runningWorker {
	return runWorker(t, s.Connect(t, id), worker.Config{ID: id, RegisterEvery: 100 * time.Millisecond,
		FetchWait: 100 * time.Millisecond})
}

// runWorker runs a worker on nc until the test ends or its stop is called.
func runWorker(t *testing.T, nc *nats.Conn, cfg worker.Config) *runningWorker {
	w, err := worker.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := testrig.Run(t, "worker "+cfg.ID, func(ctx context.Context) error {
		err := w.Run(ctx)
		if nc.IsClosed() { // the test cut its connection: a worker that died, as the test meant
			return nil
		}
		return err
	})
	return &runningWorker{w: w, nc: nc, stop: stop}
}

// runPlanner runs a planner on a connection of its own to s; stop returns once the planner has stopped, and closes
// its connection.
func runPlanner(t *testing.T, s *testrig.Embedded, cfg Config) (p *Planner, stop func()) {
	nc := s.Connect(t, "planner")
	p, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopRun := testrig.Run(t, "planner", p.Run)
	return p, func() { stopRun(); nc.Close() }
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

// waitFor waits up to 10 s for what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testrig.Eventually(t, 10*time.Second, what, cond)
}

// TestPlannerAssignsLiveWorkers: the plan's replicas go to registered workers, the rest stay idle; a worker that
// stops (deregistering) or dies (its registration goes stale) is replaced by an idle one, and the plan and spec are
// in the bucket with an epoch that survives a planner restart.
func TestPlannerAssignsLiveWorkers(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, WorkerTimeout: time.Second,
		System: "static"}
	_, stopPlanner := runPlanner(t, s, cfg)

	ws := map[string]*runningWorker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		ws[id] = startWorker(t, s, id)
	}
	waitFor(t, "2 of 3 workers serve", func() bool { return len(serving(ws)) == 2 })
	testrig.Consistently(t, 300*time.Millisecond, "2 workers serve a plan of 2 replicas", func() bool {
		return len(serving(ws)) == 2
	})

	// A worker that stops deregisters: the idle one takes over.
	var stopped string
	for id := range serving(ws) {
		stopped = id
		break
	}
	ws[stopped].stop()
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
	kv := testrig.Bucket(t, s.Connect(t, "check"))
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
	runPlanner(t, s, cfg)
	waitFor(t, "the new planner publishes", func() bool { return epoch() == e1+1 })
	testrig.Consistently(t, 500*time.Millisecond, "every worker serving before the planner restart serves",
		func() bool {
			after := serving(ws)
			for id := range before {
				if !after[id] {
					return false
				}
			}
			return true
		})
}

const twoVariants = `
name: dem
slo_ms: 1000
tasks:
  - name: a
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 20, p95_ms: 21}]}
      - {name: y, accuracy: 0.8, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
  - {task: a, variant: y, replicas: 1, max_batch: 1}
`

// TestPlannerRoutesByReportedDemand: with no demand everything goes to the most accurate variant (x, 50 QPS); when
// frontends report 100 QPS, the routing sends the half x cannot take to y, without changing the plan's epoch.
func TestPlannerRoutesByReportedDemand(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(twoVariants))
	if err != nil {
		t.Fatal(err)
	}
	runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, DemandAlpha: 1,
		Config: control.Config{RouteUtilization: 1}, System: "static"})
	nc := s.Connect(t, "frontend")
	kv := testrig.Bucket(t, nc)
	current := func() plan.Plan {
		pl, _ := readPlan(kv, "dem")
		return pl
	}
	waitFor(t, "the first plan", func() bool { return len(current().Routing.Root) == 1 })
	if r := current().Routing.Root[0]; r.Variant != "x" || r.Prob != 1 {
		t.Fatalf("with no demand the root routes %+v, want all to x", r)
	}
	epoch := current().Epoch
	for _, f := range []string{"f1", "f2"} { // two frontends, 50 QPS each
		reportDemand(t.Context(), nc, "dem", f, 500*time.Millisecond, fixed(25))
	}
	waitFor(t, "routing for 100 QPS", func() bool { return len(current().Routing.Root) == 2 })
	pl := current()
	if r := pl.Routing.Root; r[0].Variant != "x" || math.Abs(r[0].Prob-0.5) > 1e-9 || r[1].Variant != "y" {
		t.Errorf("at 100 QPS the root routes %+v, want half to x (its capacity, 50) and half to y", r)
	}
	if b := pl.Routing.Backup["a"]; len(b) != 1 || b[0].Variant != "y" || math.Abs(b[0].LeftoverQPS-150) > 1e-6 {
		t.Errorf("backup %+v, want y with 150 QPS left", b)
	}
	if pl.Epoch != epoch {
		t.Errorf("new routing changed the epoch from %d to %d", epoch, pl.Epoch)
	}
}

const measuredFanout = `
name: fan
slo_ms: 1000
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}
  - name: b
    variants:
      - {name: p, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 20, p95_ms: 21}]}
      - {name: q, accuracy: 0.8, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
  - {task: b, variant: p, replicas: 1, max_batch: 1}
  - {task: b, variant: q, replicas: 1, max_batch: 1}
`

// TestPlannerUsesMeasuredFanout: the profile says a/x emits 1 sub-request per item, so 20 QPS fit b/p (50 QPS);
// when a worker's heartbeats say it emits 4, the planner routes the 80 QPS reaching b as 50 to p and 30 to q.
func TestPlannerUsesMeasuredFanout(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(measuredFanout))
	if err != nil {
		t.Fatal(err)
	}
	runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, DemandAlpha: 1,
		Config: control.Config{RouteUtilization: 1}, System: "static"})
	nc := s.Connect(t, "frontend")
	ctx := t.Context()
	kv := testrig.Bucket(t, nc)
	current := func() plan.Plan {
		pl, _ := readPlan(kv, "fan")
		return pl
	}
	waitFor(t, "the first plan", func() bool { return current().Epoch > 0 })
	stop := make(chan struct{})
	defer close(stop)
	go func() { // 20 QPS of demand, and a worker of a/x whose items emit 4 sub-requests each
		started := time.Now()
		var items uint64
		for beat := int64(1); ; beat++ {
			data, _ := msgpack.Marshal(&wire.DemandReport{Frontend: "f", Count: 10, IntervalMs: 500})
			nc.Publish(wire.DemandSubject("fan"), data)
			items += 10
			reg, _ := json.Marshal(wire.Registration{ID: "meter", Started: started, Updated: time.Now(), Heartbeat: beat,
				Observed: map[string]wire.Observed{"fan:a/x": {FanoutCounts: wire.FanoutCounts{Items: items,
					Children: map[string]uint64{"b": 4 * items}}}}})
			kv.Put(ctx, wire.WorkerKey("meter"), reg)
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	waitFor(t, "routing by the measured factor", func() bool {
		f, ok := current().Fanout["a/x"]
		return ok && math.Abs(f.Mean-4) < 1e-9 && len(current().Routing.Downstream["a/x"]["b"]) == 2
	})
	r := current().Routing.Downstream["a/x"]["b"]
	if r[0].Variant != "p" || math.Abs(r[0].Prob-50.0/80) > 0.02 || r[1].Variant != "q" {
		t.Errorf("a/x routes b as %+v, want 5/8 to p and the rest to q", r)
	}
}

// TestPlannerReplansForDemand: with the MILP allocator, the planner plans for the demand the frontends report on the
// live workers: few servers at low demand (the rest idle), more as it rises (hardware scaling), then all of them
// with faster variants and a lower expected accuracy (accuracy scaling), each plan under a new epoch.
func TestPlannerReplansForDemand(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Load("../../examples/ocr-chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// No headroom: each plan is the solver's for the reported demand (TestHeadroomIsSpentInServersOnly, in
	// pkg/control, covers the headroom).
	p, _ := runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, DemandAlpha: 1,
		WorkerTimeout: 2 * time.Second, Config: control.Config{Headroom: -1, SolveTimeLimit: 2 * time.Second}})
	ws := map[string]*runningWorker{}
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("w%d", i)
		ws[id] = startWorker(t, s, id)
	}

	nc := s.Connect(t, "frontend")
	ctx := t.Context()
	kv := testrig.Bucket(t, nc)
	current := func() plan.Plan {
		pl, _ := readPlan(kv, sp.Name)
		return pl
	}
	var qps atomicFloat
	reportDemand(ctx, nc, sp.Name, "f", 500*time.Millisecond, func() int { return int(qps.load() / 2) })

	var lastEpoch uint64
	var lastAccuracy float64
	lastServers := 0
	for _, step := range []struct {
		qps  float64
		mode string
	}{
		{40, plan.ModeHardware},
		{140, plan.ModeHardware},
		{300, plan.ModeAccuracy},
	} {
		want, err := allocate.Solve(allocate.Input{Spec: sp, Demand: step.qps, Servers: 6,
			Utilization: p.cfg.RouteUtilization}, allocate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		servers := want.ServersUsed
		if want.Mode != step.mode || step.mode == plan.ModeHardware && servers <= lastServers {
			t.Fatalf("the example no longer shows the curve: at %v QPS the solver says %s on %d servers", step.qps,
				want.Mode, servers)
		}
		qps.store(step.qps)
		var pl plan.Plan
		// waitLong: the first plan also waits for the six workers' first heartbeats, which a busy machine under the
		// race detector can delay by seconds.
		waitLong(t, fmt.Sprintf("a plan for %v QPS", step.qps), func() bool {
			pl = current()
			return pl.Allocation != nil && pl.Allocation.DemandQPS == step.qps && pl.Allocation.ClusterServers == 6
		})
		a := pl.Allocation
		if pl.Mode != step.mode || a.ActiveServers != servers || pl.Servers() != servers {
			t.Errorf("%v QPS: mode %s with %d active servers (%d replicas), want %s with %d", step.qps, pl.Mode,
				a.ActiveServers, pl.Servers(), step.mode, servers)
		}
		if pl.Epoch <= lastEpoch {
			t.Errorf("%v QPS: epoch %d after %d", step.qps, pl.Epoch, lastEpoch)
		}
		if step.mode == plan.ModeAccuracy && a.SystemAccuracy >= lastAccuracy {
			t.Errorf("%v QPS: accuracy scaling expects %.3f, not below hardware scaling's %.3f", step.qps,
				a.SystemAccuracy, lastAccuracy)
		}
		waitFor(t, fmt.Sprintf("%d workers serving at %v QPS", servers, step.qps), func() bool {
			return len(serving(ws)) == servers
		})
		lastEpoch, lastAccuracy, lastServers = pl.Epoch, a.SystemAccuracy, servers
	}
}

// atomicFloat is a float64 shared between goroutines.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) load() float64   { return math.Float64frombits(f.bits.Load()) }
func (f *atomicFloat) store(v float64) { f.bits.Store(math.Float64bits(v)) }

const treeSpec = `
name: moves
slo_ms: 1000
tasks:
  - name: a
    children: [b]
    variants:
      - name: x
        accuracy: 0.9
        executor: {kind: emulated}
        fanout: {mean: 1}
        profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]
  - name: b
    variants:
      - name: "y"
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]
      - name: z
        accuracy: 0.8
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 2, p95_ms: 3}]
`

// TestRehomeMovesRetiredQueue: while a plan hosts a variant its queue stays; once a plan no longer hosts it, the
// messages waiting there go to the variant the plan routes their task to from their upstream hop, headers kept, each
// under an id of its own, moved by the planner's step; one the plan routes nowhere stays; moving again moves nothing
// twice.
func TestRehomeMovesRetiredQueue(t *testing.T) {
	p, sp, js, stream := movesPlanner(t)
	ctx := context.Background()
	if _, err := bus.EnsureVariantConsumer(ctx, js, sp.Name, "b", "y", time.Second); err != nil {
		t.Fatal(err)
	}
	old := &plan.Plan{Pipeline: sp.Name, Variants: []plan.VariantPlan{{Task: "a", Variant: "x", Replicas: 1},
		{Task: "b", Variant: "y", Replicas: 1}}}
	deadline := wire.FormatDeadline(time.Now().Add(time.Minute))
	for i, path := range []string{"a/x", "a/x", "a/gone"} {
		m := nats.NewMsg(wire.TaskSubject(sp.Name, "b", "y"))
		m.Header.Set(wire.HeaderPath, path)
		m.Header.Set(wire.HeaderRequestID, fmt.Sprintf("f-%d", i))
		m.Header.Set(wire.HeaderDeadline, deadline)
		m.Header.Set(wire.HeaderMsgID, wire.TaskMsgID(fmt.Sprintf("f-%d", i), "0", "b", "y"))
		m.Data = []byte{byte(i)}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitCounted(t, js, sp, "b", "y", 3)
	next := &plan.Plan{Pipeline: sp.Name, Variants: []plan.VariantPlan{{Task: "a", Variant: "x", Replicas: 1},
		{Task: "b", Variant: "z", Replicas: 1}},
		Routing: plan.Routing{Root: []plan.Route{{Variant: "x", Prob: 1}},
			Downstream: map[string]map[string][]plan.Route{"a/x": {"b": {{Variant: "z", Prob: 1}}}}}}
	counts := func() map[string]uint64 {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubjects(sp.Name)))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects
	}
	p.rehome(ctx, sp, old, nil, nil) // hosts b/y: its queue stays
	if got := counts(); got[wire.TaskSubject(sp.Name, "b", "y")] != 3 || len(got) != 1 {
		t.Fatalf("messages per subject %v under the plan that hosts b/y: want the 3 at b/y", got)
	}
	// The planner's once-a-second step moves them, under the plan in force (next, with its routing computed again).
	var err error
	if p.kv, err = bus.OpenBucket(ctx, js, jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	// No demand reported: the loop keeps next, and the step only moves the queues.
	if err := p.core.Begin(p.core.Pipelines()[0], next, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time finds only the message routed nowhere
		p.step(ctx, time.Now())
		if got := counts(); got[wire.TaskSubject(sp.Name, "b", "z")] != 2 || got[wire.TaskSubject(sp.Name, "b", "y")] != 1 {
			t.Fatalf("messages per subject %v: want 2 moved to b/z and the one routed nowhere left at b/y", got)
		}
	}

	cons, err := bus.EnsureVariantConsumer(ctx, js, sp.Name, "b", "z", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		h := m.Headers()
		i := int(m.Data()[0])
		id := wire.TaskMsgID(fmt.Sprintf("f-%d", i), "0", "b", "y")
		if h.Get(wire.HeaderPath) != "a/x" || h.Get(wire.HeaderRequestID) != fmt.Sprintf("f-%d", i) ||
			h.Get(wire.HeaderDeadline) != deadline || h.Get(wire.HeaderMsgID) != wire.RehomedMsgID(id, "z") {
			t.Errorf("moved message %d has headers %v", i, h)
		}
		n++
		m.Ack()
	}
	if n != 2 {
		t.Errorf("fetched %d moved messages, want 2", n)
	}
}
