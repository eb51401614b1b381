package frontend

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/catalog"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestPlanThatHostsNothing: a plan that gives the pipeline no server (what the planner publishes for a pipeline the
// joint division shed) is followed by workers and frontends, with no complaint: the workers go idle, and both
// frontends, with admission control and without, refuse its requests at once (overloaded, naming the task it has no
// server for), never publishing them, and report them as demand. The plan after it is followed as any other.
func TestPlanThatHostsNothing(t *testing.T) {
	spec, err := pipeline.Load(testSpec)
	if err != nil {
		t.Fatal(err)
	}
	logs := &countingHandler{counts: map[string]int{}}
	s := &testSystem{srv: testrig.Server(t), spec: spec, logs: logs, log: slog.New(logs)}
	pl, err := planner.New(s.connect(t, "planner"), planner.Config{Pipelines: []*pipeline.Spec{spec},
		Storage: jetstream.MemoryStorage, System: "static", Logger: s.log})
	if err != nil {
		t.Fatal(err)
	}
	stopPlanner := testrig.Run(t, "planner", pl.Run)
	s.addWorkers(t, 2)
	gated, _ := s.startFrontend(t, Config{ID: "gated"})
	ungated, _ := s.startFrontend(t, Config{ID: "ungated", NoAdmission: true})
	stopPlanner() // the test writes the plans from here on, as the planner would

	ctx := context.Background()
	nc := s.connect(t, "test")
	kv, err := bus.OpenBucket(ctx, testrig.JetStream(t, nc), jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hosting plan.Plan
	getJSON(t, kv, wire.PlanKey(spec.Name), &hosting)
	assigned := map[string]plan.Assignment{}
	for _, w := range s.workers {
		var a plan.Assignment
		getJSON(t, kv, wire.AssignKey(w.ID()), &a)
		assigned[w.ID()] = a
	}
	demand, gaps := watchDemand(t, nc, spec.Name)
	rootTasks := watchRootTasks(t, s)

	// The plan that hosts nothing, and every worker idle under it.
	empty := plan.Plan{Pipeline: spec.Name, Epoch: hosting.Epoch + 1, Mode: plan.ModeOverloaded,
		Allocation: &plan.Allocation{Optimal: true}}
	putJSON(t, kv, wire.PlanKey(spec.Name), empty)
	for id := range assigned {
		putJSON(t, kv, wire.AssignKey(id), plan.Assignment{Worker: id, Epoch: empty.Epoch})
	}
	for _, f := range []*Frontend{gated, ungated} {
		testrig.Eventually(t, 5*time.Second, f.cfg.ID+" follows the plan that hosts nothing", func() bool {
			_, p := f.lookup(spec.Name)
			return p != nil && p.Epoch == empty.Epoch
		})
	}
	testrig.Eventually(t, 5*time.Second, "every worker idle", func() bool {
		for _, w := range s.workers {
			if w.Serving() != "" {
				return false
			}
		}
		return true
	})
	published := rootTasks()
	const each = 4
	for _, f := range []*Frontend{gated, ungated} {
		srv := httptest.NewServer(f.Handler())
		for range each {
			start := time.Now()
			code, body := postInfer(t, srv.URL+"/v2/models/"+spec.Name+"/infer")
			if code != http.StatusTooManyRequests || !strings.Contains(body, "no server for task "+spec.Root().Name) {
				t.Errorf("%s: HTTP %d %q, want 429 naming task %s", f.cfg.ID, code, body, spec.Root().Name)
			}
			t.Logf("%s: refused in %v", f.cfg.ID, time.Since(start)) // at once: before any publish (below)
		}
		srv.Close()
	}
	c := s.newClient(t)
	sent := []string{c.Send(t, spec.Name, goodRequest(t), nil)}
	for subj, ms := range c.Wait(t, sent, 5*time.Second) {
		if rep := decodeReply(t, ms[0]); rep.Status != wire.StatusOverloaded {
			t.Errorf("NATS request %s: %s %q, want overloaded", subj, rep.Status, rep.Error)
		}
	}
	if n := rootTasks() - published; n != 0 {
		t.Errorf("%d root task messages published under a plan that hosts nothing", n)
	}
	testrig.Eventually(t, 5*time.Second, "the refused requests reported as demand", func() bool {
		return demand("gated") >= each && demand("ungated") >= each && demand("gated")+demand("ungated") >= 2*each+1
	})
	// and as arrivals: a gap before each but the first (the plan check's arrivals, and the newest ones' rate at a
	// step, are the demand's, as in the simulator)
	for _, id := range []string{"gated", "ungated"} {
		if n := gaps(id); n < each-1 {
			t.Errorf("%s reported %d gaps between its %d refused requests, want at least %d", id, n, demand(id), each-1)
		}
	}

	// The next plan hosts the pipeline again: followed, and served.
	hosting.Epoch = empty.Epoch + 1
	putJSON(t, kv, wire.PlanKey(spec.Name), hosting)
	for id, a := range assigned {
		a.Epoch = hosting.Epoch
		putJSON(t, kv, wire.AssignKey(id), a)
	}
	testrig.Eventually(t, 10*time.Second, "the workers serve the plan after", func() bool {
		for _, w := range s.workers {
			if assigned[w.ID()].Variant != "" && w.Serving() == "" {
				return false
			}
		}
		_, p := ungated.lookup(spec.Name)
		return p != nil && p.Epoch == hosting.Epoch
	})
	if n := logs.count(catalog.ComplainPlan); n != 0 {
		t.Errorf("%d complaints %q", n, catalog.ComplainPlan)
	}
}

func getJSON(t *testing.T, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

func putJSON(t *testing.T, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, data); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

// watchDemand sums the requests, and the gaps between them, each frontend reports for pipeline from now on, by
// frontend.
func watchDemand(t *testing.T, nc *nats.Conn, pipeline string) (requests, gaps func(frontend string) int) {
	var mu sync.Mutex
	sums, gapSums := map[string]int{}, map[string]int{}
	sub, err := nc.Subscribe(wire.DemandSubject(pipeline), func(m *nats.Msg) {
		var r wire.DemandReport
		if msgpack.Unmarshal(m.Data, &r) == nil {
			mu.Lock()
			sums[r.Frontend] += r.Count
			gapSums[r.Frontend] += len(r.GapsMs)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	read := func(m map[string]int) func(string) int {
		return func(frontend string) int {
			mu.Lock()
			defer mu.Unlock()
			return m[frontend]
		}
	}
	return read(sums), read(gapSums)
}

// postInfer posts one infer request, and returns its status code and body.
func postInfer(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(
		`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
