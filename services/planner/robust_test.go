package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/catalog"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// milpSpec is one task whose replica serves 200 QPS (170 at the routing's 85%): 400 QPS takes 3 replicas.
const milpSpec = `
name: pl
slo_ms: 1000
tasks:
  - name: a
    variants:
      - name: x
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]
`

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startWorkerAt runs a worker connected to url, with the default registration period (1 s).
func startWorkerAt(t *testing.T, url, id string) *runningWorker {
	return runWorker(t, testrig.Connect(t, url, id), worker.Config{ID: id, FetchWait: 100 * time.Millisecond,
		Logger: quiet})
}

// reportDemand plays a frontend named frontend on nc: every period until ctx is done, it reports the requests count
// says it took in that period, or nothing while count is negative (a silent frontend).
func reportDemand(ctx context.Context, nc *nats.Conn, pipelineName, frontend string, period time.Duration,
	count func() int) {
	go func() {
		for ctx.Err() == nil {
			if n := count(); n >= 0 {
				data, _ := msgpack.Marshal(&wire.DemandReport{Frontend: frontend, Count: n,
					IntervalMs: float64(period.Milliseconds())})
				nc.Publish(wire.DemandSubject(pipelineName), data)
			}
			select {
			case <-ctx.Done():
			case <-time.After(period):
			}
		}
	}()
}

// fixed is a count for reportDemand.
func fixed(n int) func() int { return func() int { return n } }

// waitLong is waitFor for what takes a demand estimate some seconds to settle.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testrig.Eventually(t, 30*time.Second, what, cond)
}

func readPlan(kv jetstream.KeyValue, name string) (plan.Plan, bool) {
	var pl plan.Plan
	e, err := kv.Get(context.Background(), wire.PlanKey(name))
	if err != nil {
		return pl, false
	}
	return pl, json.Unmarshal(e.Value(), &pl) == nil
}

// TestPlannerRidesOutABusOutage: the NATS server is killed for 7 s (more than three WorkerTimeouts) and restarted
// on the same store. No heartbeat and no demand report crosses the bus meanwhile, but that is the bus, not the
// workers or the frontends: the planner keeps every assignment and its plan (same epoch), and no worker stops
// serving, during the outage or after it.
func TestPlannerRidesOutABusOutage(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	// A real server, which the test can kill and restart on the same store.
	srv, err := natsproc.Start(natsproc.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop) // after the services' cleanups
	sp, err := pipeline.Parse([]byte(milpSpec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(testrig.Connect(t, srv.URL(), "planner"), Config{Pipelines: []*pipeline.Spec{sp},
		Storage: jetstream.FileStorage, WorkerTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "planner", p.Run)
	ws := map[string]*runningWorker{}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("w%d", i)
		ws[id] = startWorkerAt(t, srv.URL(), id)
	}
	ctx := t.Context()
	reportDemand(ctx, testrig.Connect(t, srv.URL(), "frontend"), sp.Name, "f1", time.Second, fixed(400))

	kv := testrig.Bucket(t, testrig.Connect(t, srv.URL(), "reader"))
	waitLong(t, "a plan for 400 QPS served by 3 workers", func() bool {
		pl, ok := readPlan(kv, sp.Name)
		return ok && pl.Allocation != nil && math.Abs(pl.Allocation.Estimate()-400) < 40 && pl.Servers() == 3 &&
			len(serving(ws)) == 3
	})
	time.Sleep(time.Second) // settled: a re-plan or reassignment still under way finishes before the snapshot
	before, _ := readPlan(kv, sp.Name)
	servingBefore := map[string]string{}
	for id, w := range ws {
		servingBefore[id] = w.w.Serving()
	}

	// Watch every worker throughout: none may stop serving or change variant.
	var mu sync.Mutex
	var changes []string
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	go func() {
		for watchCtx.Err() == nil {
			for id, w := range ws {
				if got := w.w.Serving(); got != servingBefore[id] {
					mu.Lock()
					changes = append(changes, fmt.Sprintf("%s: %q -> %q", id, servingBefore[id], got))
					mu.Unlock()
					servingBefore[id] = got
				}
			}
			time.Sleep(20 * time.Millisecond) // the watch's resolution
		}
	}()

	srv.Kill()
	time.Sleep(7 * time.Second) // the outage
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // three WorkerTimeouts after the restart, for the planner to wrongly drop a worker
	stopWatching()

	mu.Lock()
	defer mu.Unlock()
	if len(changes) > 0 {
		t.Errorf("workers changed what they serve across the outage: %v", changes)
	}
	after, ok := readPlan(kv, sp.Name)
	if !ok || after.Epoch != before.Epoch || after.Servers() != before.Servers() {
		t.Errorf("plan after the outage: epoch %d with %d replicas, want epoch %d with %d (no re-plan)", after.Epoch,
			after.Servers(), before.Epoch, before.Servers())
	}
	p.mu.Lock()
	est := p.core.Demand()[sp.Name]
	p.mu.Unlock()
	if est < 350 {
		t.Errorf("demand estimate %v after the outage, want about 400: no report is not zero demand", est)
	}
}

// TestRestartedPlannerResumesThePlanInKV: a planner restarted while the system serves 400 QPS first publishes the
// plan KV holds (same epoch, same replicas) rather than the static plan, and does not re-plan from its first second
// of demand: no worker moves.
func TestRestartedPlannerResumesThePlanInKV(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(milpSpec + `
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, WorkerTimeout: 2 * time.Second,
		Logger: quiet}
	_, stop := runPlanner(t, s, cfg)
	ws := map[string]*runningWorker{}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("w%d", i)
		ws[id] = startWorker(t, s, id)
	}
	nc := s.Connect(t, "test")
	ctx := t.Context()
	kv := testrig.Bucket(t, nc)
	reportDemand(ctx, nc, sp.Name, "f1", time.Second, fixed(400))
	waitLong(t, "a plan for 400 QPS served by 3 workers", func() bool {
		pl, ok := readPlan(kv, sp.Name)
		return ok && pl.Allocation != nil && math.Abs(pl.Allocation.Estimate()-400) < 40 && len(serving(ws)) == 3
	})
	before, _ := readPlan(kv, sp.Name)
	servingBefore := map[string]string{}
	for id, w := range ws {
		servingBefore[id] = w.w.Serving()
	}

	stop()
	w, err := kv.Watch(ctx, wire.PlanKey(sp.Name), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	runPlanner(t, s, cfg)
	var published []plan.Plan
	for end := time.After(4 * time.Second); ; {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			var pl plan.Plan
			json.Unmarshal(e.Value(), &pl)
			published = append(published, pl)
			continue
		case <-end:
		}
		break
	}
	if len(published) == 0 {
		t.Fatal("the restarted planner published no plan")
	}
	first := published[0]
	if first.Epoch != before.Epoch || first.Mode != before.Mode || first.Servers() != before.Servers() {
		t.Errorf("the restarted planner's first plan: epoch %d, mode %s, %d replicas; want the one in KV: epoch %d, "+
			"mode %s, %d replicas", first.Epoch, first.Mode, first.Servers(), before.Epoch, before.Mode, before.Servers())
	}
	for i, pl := range published {
		if pl.Epoch != before.Epoch {
			t.Errorf("plan %d after the restart has epoch %d (mode %s, %d replicas): re-planned from its first "+
				"seconds", i, pl.Epoch, pl.Mode, pl.Servers())
		}
	}
	now := map[string]string{}
	for id, w := range ws {
		now[id] = w.w.Serving()
	}
	if !maps.Equal(now, servingBefore) {
		t.Errorf("the restart moved workers: %v, before %v", now, servingBefore)
	}
}

// TestPlannerRepairsTheBucket: what others write to the planner's keys is refused by its readers and put back by
// the planner: `{}` under plan.<p> (workers keep serving), garbage under spec.<p> (a frontend started later gets
// the real spec), a bogus assignment (the worker keeps serving), an assignment of a worker that does not exist
// (deleted); a registration under another worker's key gets no replica, and a demand report of 1e6 QPS is refused
// and counted.
func TestPlannerRepairsTheBucket(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage,
		WorkerTimeout: time.Second, System: "static", Logger: quiet})
	ws := map[string]*runningWorker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		ws[id] = startWorker(t, s, id)
	}
	waitFor(t, "2 of 3 workers serve", func() bool { return len(serving(ws)) == 2 })

	nc := s.Connect(t, "stranger")
	ctx := t.Context()
	kv := testrig.Bucket(t, nc)
	get := func(key string) []byte {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return nil
		}
		return e.Value()
	}
	put := func(key, value string) {
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	servingBefore := map[string]string{}
	var busy string
	for id, w := range ws {
		servingBefore[id] = w.w.Serving()
		if busy == "" && servingBefore[id] != "" {
			busy = id
		}
	}
	asBefore := func() bool {
		for id, w := range ws {
			if w.w.Serving() != servingBefore[id] {
				return false
			}
		}
		return true
	}
	unchanged := func(what string) {
		t.Helper()
		for id, w := range ws {
			if got := w.w.Serving(); got != servingBefore[id] {
				t.Errorf("after %s, %s serves %q, was %q", what, id, got, servingBefore[id])
			}
		}
	}

	for _, bad := range []string{`{}`, `null`, `{"pipeline": "pl", "epoch": 99, "mode": "static"}`} {
		good := get(wire.PlanKey("pl"))
		put(wire.PlanKey("pl"), bad)
		waitFor(t, "the planner puts the plan back after "+bad, func() bool {
			return string(get(wire.PlanKey("pl"))) == string(good)
		})
		testrig.Consistently(t, 200*time.Millisecond, "every worker serves what it served, after plan "+bad, asBefore)
	}

	goodSpec := get(wire.SpecKey("pl"))
	put(wire.SpecKey("pl"), `{"name": "pl", "garbage": true}`)
	waitFor(t, "the planner puts the spec back", func() bool { return string(get(wire.SpecKey("pl"))) == string(goodSpec) })
	cat := catalog.Watch(ctx, nc, kv, quiet, nil)
	<-cat.Ready()
	if s, pl := cat.Lookup("pl"); s == nil || pl == nil {
		t.Errorf("a frontend started after the garbage spec sees spec %v, plan %v", s != nil, pl != nil)
	}

	goodAssign := get(wire.AssignKey(busy))
	put(wire.AssignKey(busy), fmt.Sprintf(`{"worker": %q, "pipeline": "pl", "task": "a", "variant": "nope", "max_batch": 1}`, busy))
	waitFor(t, "the planner puts the assignment back", func() bool {
		return string(get(wire.AssignKey(busy))) == string(goodAssign)
	})
	unchanged("a bogus assignment")

	put(wire.AssignKey("ghost"), `{"worker": "ghost", "pipeline": "pl", "task": "a", "variant": "x", "max_batch": 1}`)
	waitFor(t, "the planner deletes the assignment of a worker it does not know", func() bool {
		return get(wire.AssignKey("ghost")) == nil
	})

	// A registration under another's key, and garbage: neither becomes a worker.
	reg, _ := json.Marshal(wire.Registration{ID: "w1", Started: time.Now(), Updated: time.Now(), Heartbeat: 1})
	for range 3 {
		put(wire.WorkerKey("fake"), string(reg))
		put(wire.WorkerKey("junk"), `"hello"`)
		time.Sleep(300 * time.Millisecond) // as often as heartbeats come: time for the planner to assign a worker
	}
	if get(wire.AssignKey("fake")) != nil || get(wire.AssignKey("junk")) != nil {
		t.Error("a forged registration got an assignment")
	}
	if n := p.Complaints()[complainRegistration]; n < 6 {
		t.Errorf("%d registrations refused, want the 6 forged ones", n)
	}

	data, _ := msgpack.Marshal(&wire.DemandReport{Frontend: "forger", Count: 1_000_000, IntervalMs: 1000})
	nc.Publish(wire.DemandSubject("pl"), data)
	data, _ = msgpack.Marshal(&wire.DemandReport{Frontend: "forger", Count: 5, IntervalMs: -1})
	nc.Publish(wire.DemandSubject("pl"), data)
	nc.Flush()
	waitFor(t, "the forged demand reports are counted", func() bool { return p.Complaints()[complainReport] >= 2 })
	// A report taken in moves the estimate at the planner's next step, within a second.
	testrig.Consistently(t, 1500*time.Millisecond, "a demand estimate of 0 after refused reports", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.core.Demand()["pl"] == 0
	})
	if n := p.Complaints()[complainTampered]; n < 6 {
		t.Errorf("%d repairs counted, want at least 6", n)
	}
	unchanged("everything")
}

// TestPlannerHoldsDemandWhileFrontendsAreSilent: the only frontend stops reporting for 10 s (it is down, or cut
// off): that is no data, not zero demand, so the plan sized for 400 QPS stays; when it reports zero, the planner
// scales down.
func TestPlannerHoldsDemandWhileFrontendsAreSilent(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(milpSpec))
	if err != nil {
		t.Fatal(err)
	}
	runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage,
		WorkerTimeout: 2 * time.Second, Logger: quiet})
	ws := map[string]*runningWorker{}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("w%d", i)
		ws[id] = startWorker(t, s, id)
	}
	nc := s.Connect(t, "frontend")
	ctx := t.Context()
	kv := testrig.Bucket(t, nc)
	var qps atomicFloat
	qps.store(400)
	var silent atomic.Bool
	reportDemand(ctx, nc, sp.Name, "f1", time.Second, func() int {
		if silent.Load() {
			return -1
		}
		return int(qps.load())
	})
	waitLong(t, "a plan for 400 QPS on 3 workers", func() bool {
		pl, ok := readPlan(kv, sp.Name)
		return ok && pl.Allocation != nil && math.Abs(pl.Allocation.Estimate()-400) < 40 && pl.Servers() == 3
	})
	before, _ := readPlan(kv, sp.Name)
	silent.Store(true)
	testrig.Consistently(t, 10*time.Second, fmt.Sprintf("the plan of epoch %d with 3 replicas, without reports",
		before.Epoch), func() bool {
		after, _ := readPlan(kv, sp.Name)
		return after.Epoch == before.Epoch && after.Servers() == 3
	})
	qps.store(0)
	silent.Store(false)
	waitLong(t, "a plan for the reported zero on 1 worker", func() bool {
		pl, ok := readPlan(kv, sp.Name)
		return ok && pl.Servers() == 1
	})
}

// TestDemandBacklogIsBounded: while the planner cannot take demand reports (held up here by a test hook), at most
// DemandBacklog of them wait; the rest are dropped and counted in its metrics.
func TestDemandBacklogIsBounded(t *testing.T) {
	s := testrig.Server(t)
	sp, err := pipeline.Parse([]byte(milpSpec))
	if err != nil {
		t.Fatal(err)
	}
	const backlog, sent = 8, 100
	var held sync.Mutex
	p, _ := runPlanner(t, s, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage,
		DemandBacklog: backlog, Logger: quiet})
	hold := func() { held.Lock(); held.Unlock() }
	p.beforeReport.Store(&hold)
	nc := s.Connect(t, "frontend")
	waitFor(t, "the planner's demand subscription", func() bool {
		sz, err := s.Subsz(&server.SubszOptions{Subscriptions: true, Test: wire.DemandSubject(sp.Name)})
		return err == nil && sz.Total > 0
	})
	data, err := msgpack.Marshal(&wire.DemandReport{Frontend: "f1", Count: 10, IntervalMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	held.Lock()
	for range sent {
		if err := nc.Publish(wire.DemandSubject(sp.Name), data); err != nil {
			t.Fatal(err)
		}
	}
	err = testrig.WaitFor(10*time.Second, "the reports over the backlog dropped", func() bool {
		return p.droppedReports.Total() == sent-backlog
	})
	held.Unlock()
	if err != nil {
		t.Fatalf("%v: %d of %d dropped with a backlog of %d", err, p.droppedReports.Total(), sent, backlog)
	}
	if n := p.metricsState().DroppedReports; n != sent-backlog {
		t.Errorf("metrics: %d dropped reports, want %d", n, sent-backlog)
	}
}
