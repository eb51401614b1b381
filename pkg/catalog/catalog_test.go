package catalog

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

const specYAML = `
name: cat
slo_ms: 1000
tasks:
  - name: a
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}
      - {name: y, accuracy: 0.8, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 2, p95_ms: 3}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
`

// waitFor waits up to 5 s for what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testrig.Eventually(t, 5*time.Second, what, cond)
}

// TestCatalogKeepsTheLastGoodValues: a plan that fails validation against its spec (`{}`, `null`, one routing to a
// variant it does not host) and a spec that does not parse are refused and counted, and the last good ones stay; a
// plan read before its spec is followed once the spec arrives; a spec written again unchanged keeps its *Spec.
func TestCatalogKeepsTheLastGoodValues(t *testing.T) {
	nc := testrig.Server(t).Connect(t, "test")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The planner's part, with its function: the test writes what the planner would.
	kv, err := bus.OpenBucket(ctx, testrig.JetStream(t, nc), jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := pipeline.Parse([]byte(specYAML))
	if err != nil {
		t.Fatal(err)
	}
	good, _ := plan.Static(sp)
	good.Epoch = 4
	good.Allocation = &plan.Allocation{ClusterServers: 64, ActiveServers: good.Servers()}
	good.Routing = routing.MostAccurateFirst(routing.Input{Spec: sp, Plan: good})
	put := func(key string, value []byte) {
		if _, err := kv.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	specJSON, _ := json.Marshal(sp)
	planJSON, _ := json.Marshal(good)

	// The plan first, then its spec.
	put(wire.PlanKey(sp.Name), planJSON)
	changes := make(chan struct{}, 100)
	c := Watch(ctx, nc, kv, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { changes <- struct{}{} })
	<-c.Ready()
	if _, p := c.Lookup(sp.Name); p != nil || c.SpareServers() != 0 {
		t.Fatalf("a plan is followed (or its %d spare servers counted) before there is a spec to check it against",
			c.SpareServers())
	}
	put(wire.SpecKey(sp.Name), specJSON)
	waitFor(t, "the plan is followed once its spec arrives", func() bool {
		s, p := c.Lookup(sp.Name)
		return s != nil && p != nil && p.Epoch == 4
	})
	specBefore, _ := c.Lookup(sp.Name)

	unhosted := *good
	unhosted.Routing.Root = []plan.Route{{Variant: "y", Prob: 1}}
	unhostedJSON, _ := json.Marshal(&unhosted)
	bad := [][]byte{[]byte(`{}`), []byte(`null`), []byte(`not json`), unhostedJSON}
	// One at a time: the bucket keeps one value per key, so a watch may skip a value overwritten at once.
	for i, v := range bad {
		put(wire.PlanKey(sp.Name), v)
		waitFor(t, "the bad plan "+string(v[:min(len(v), 10)])+" is refused", func() bool {
			return c.Complaints()[ComplainPlan] == uint64(i+1)
		})
	}
	put(wire.SpecKey(sp.Name), []byte(`{"name": "cat"}`))
	waitFor(t, "the bad spec is refused", func() bool { return c.Complaints()[ComplainSpec] == 1 })
	put(wire.SpecKey(sp.Name), specJSON) // unchanged, written again
	testrig.Consistently(t, 100*time.Millisecond, "the spec in use and the last good plan kept", func() bool {
		s2, p := c.Lookup(sp.Name)
		return s2 == specBefore && p != nil && p.Epoch == 4
	})
	s2, p := c.Lookup(sp.Name)
	if p == nil || p.Epoch != 4 || p.Routing.Root[0].Variant != "x" {
		t.Fatalf("after bad plans the catalog follows %+v, want the last good one (epoch 4, root to x)", p)
	}
	if s2 != specBefore {
		t.Error("a spec written again unchanged, or a bad one, replaced the spec in use")
	}
	if n, want := c.SpareServers(), 64-good.Servers(); n != want {
		t.Errorf("the plans in force leave %d servers spare, want the last good plan's %d", n, want)
	}
	if got := c.Pipelines(); len(got) != 1 || got[0] != sp.Name {
		t.Errorf("pipelines %v", got)
	}
}
