package up

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestClassesLive runs the traffic example on two server classes, 2 fast workers and 3 cpu workers, with loki and
// prices: each worker hosts only variants of its class, the requests are answered ok, and once the fast workers are
// killed the planner re-plans onto the cpu workers alone, and the requests are answered ok again.
func TestClassesLive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system for about 20 s")
	}
	skipUnlessClassedMILP(t)
	sys, spec := startSystemWith(t, "../../examples/traffic-classes.yaml", Config{
		Workers: 5, WorkerClasses: map[string]int{"cpu": 3, "fast": 2},
		Planner: planner.Config{System: "loki", WorkerTimeout: 2 * time.Second,
			Prices: plan.Prices{"cpu": 0.4, "fast": 2.5}}})
	if n := len(sys.Workers); n != 5 {
		t.Fatalf("%d workers started, want 5", n)
	}
	c := newClient(t, sys)
	hdr := nats.Header{}
	hdr.Set(wire.HeaderTimeout, "5s")
	// checkClasses fails the test for any worker serving a variant of another class than its own.
	checkClasses := func() (byClass map[string]int) {
		byClass = map[string]int{}
		for _, w := range sys.Workers {
			served := w.Serving()
			if served == "" {
				continue
			}
			k, err := wire.ParseServedKey(served)
			if err != nil {
				t.Fatalf("worker %s serves %q: %v", w.ID(), served, err)
			}
			if wire.ClassOf(k.Variant) != w.Class() {
				t.Fatalf("worker %s of class %s serves %s", w.ID(), w.Class(), served)
			}
			byClass[w.Class()]++
		}
		return byClass
	}
	// load sends qps requests a second for d, checking the classes every tenth of a second, and returns the
	// requests' reply subjects.
	load := func(qps int, d time.Duration) []string {
		var subjects []string
		every := time.Second / time.Duration(qps)
		for start := time.Now(); time.Since(start) < d; time.Sleep(every) {
			subjects = append(subjects, c.Send(t, spec.Name, inputRequest(t), hdr))
			if len(subjects)%(qps/10+1) == 0 {
				checkClasses()
			}
		}
		return subjects
	}
	okShare := func(subjects []string) float64 {
		replies := c.Wait(t, subjects, 15*time.Second)
		ok := 0
		for _, s := range subjects {
			if decodeReply(t, replies[s][0]).Status == wire.StatusOK {
				ok++
			}
		}
		return float64(ok) / float64(len(subjects))
	}
	// A plan for the demand, on both classes: at 40 QPS the cheapest plan hosts something on fast.
	subjects := load(40, 8*time.Second)
	testrig.Eventually(t, 10*time.Second, "a fast worker serving", func() bool {
		load(40, 500*time.Millisecond)
		return checkClasses()["fast"] > 0
	})
	if share := okShare(subjects); share < 0.95 {
		t.Errorf("%.1f%% of the requests on both classes answered ok, want at least 95%%", 100*share)
	}
	pl := currentPlan(t, sys, spec.Name)
	if pl.Allocation == nil || pl.Allocation.CostPerHour <= 0 {
		t.Errorf("the plan on priced classes has no cost: %+v", pl.Allocation)
	}
	t.Logf("on both classes: plan %d %s, servers by class %v, cost %.2f/h", pl.Epoch, describe(pl),
		pl.ServersByClass(), pl.Allocation.CostPerHour)

	for i, w := range sys.Workers {
		if w.Class() == "fast" {
			sys.KillWorker(i)
		}
	}
	killed := time.Now()
	testrig.Eventually(t, 20*time.Second, "a plan on cpu alone, served", func() bool {
		load(20, 500*time.Millisecond)
		pl := currentPlan(t, sys, spec.Name)
		if pl.ServersByClass()["fast"] > 0 {
			return false
		}
		return checkClasses()["cpu"] == pl.Servers()
	})
	t.Logf("re-planned onto cpu within %v of the kill", time.Since(killed).Round(100*time.Millisecond))
	subjects = load(20, 5*time.Second)
	if share := okShare(subjects); share < 0.95 {
		t.Errorf("%.1f%% of the requests on cpu alone answered ok, want at least 95%%", 100*share)
	}
	pl = currentPlan(t, sys, spec.Name)
	t.Logf("on cpu: plan %d %s, cost %.2f/h", pl.Epoch, describe(pl), pl.Allocation.CostPerHour)
}

// describe spells a plan's replicas: "task/variant x replicas@batch, ...".
func describe(p *plan.Plan) string {
	var parts []string
	for _, v := range p.Variants {
		parts = append(parts, fmt.Sprintf("%s/%s x%d@%d", v.Task, v.Variant, v.Replicas, v.MaxBatch))
	}
	return strings.Join(parts, ", ")
}

// currentPlan is pipeline's plan in force, read from the KV bucket.
func currentPlan(t testing.TB, sys *System, pipeline string) *plan.Plan {
	t.Helper()
	nc, err := sys.Connect("test-plan-reader")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), wire.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), wire.PlanKey(pipeline))
	if err != nil {
		t.Fatal(err)
	}
	var p plan.Plan
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// skipUnlessClassedMILP skips a test when the allocation MILP does not plan on classes yet (allocate.Input.Cluster
// is being implemented in pkg/allocate): a plan for cpu servers alone must host nothing on another class.
func skipUnlessClassedMILP(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := allocate.Solve(allocate.Input{Spec: spec, Demand: 20, Servers: 3,
		Cluster: plan.NewCluster(map[string]int{"cpu": 3}, nil)}, allocate.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Variants {
		if wire.ClassOf(v.Variant) != "cpu" {
			t.Skipf("the allocation MILP does not plan on classes yet: %s/%s hosted on 3 cpu servers", v.Task, v.Variant)
		}
	}
}
