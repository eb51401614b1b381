package up

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// startSystem runs the whole system on an in-process embedded server, and waits until every planned replica is
// served by a worker.
func startSystem(t testing.TB, specFile string, workers int) (*System, *pipeline.Spec) {
	return startSystemWith(t, specFile, Config{Workers: workers})
}

// startSystemWith starts the system with cfg, after applying edits to the loaded spec. Unless cfg says otherwise, the
// planner serves the spec's static allocation, so that what a test sees does not move with the demand.
func startSystemWith(t testing.TB, specFile string, cfg Config, edits ...func(*pipeline.Spec)) (*System, *pipeline.Spec) {
	t.Helper()
	workers := cfg.Workers
	if cfg.Planner.System == "" {
		cfg.Planner.System = "static"
	}
	spec, err := pipeline.Load(specFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range edits {
		edit(spec)
	}
	sys := startPipelines(t, cfg, spec)
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	waitServing(t, sys.Frontend, sys.Workers, min(p.Servers(), workers))
	return sys, spec
}

// startPipelines starts the system with cfg on specs (in memory, a fresh data directory), stopped at the test's end.
func startPipelines(t testing.TB, cfg Config, specs ...*pipeline.Spec) *System {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.DataDir, cfg.Pipelines, cfg.Planner.Storage, cfg.MaxPayload = t.TempDir(), specs, jetstream.MemoryStorage, 8<<20
	sys, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := sys.Wait(); err != nil {
			t.Errorf("system stopped with: %v", err)
		}
	})
	return sys
}

// waitServing waits until the frontend has the plans and n workers serve a variant.
func waitServing(t testing.TB, fe *frontend.Frontend, workers []*worker.Worker, n int) {
	t.Helper()
	serving := func() int {
		k := 0
		for _, w := range workers {
			if w.Serving() != "" {
				k++
			}
		}
		return k
	}
	if err := testrig.WaitFor(10*time.Second, fmt.Sprintf("the frontend ready and %d workers serving", n), func() bool {
		select {
		case <-fe.Ready():
			return serving() == n
		default:
			return false
		}
	}); err != nil {
		t.Fatalf("%v: %d are", err, serving())
	}
}

// client sends requests with their own reply subjects on one wildcard subscription and records every reply, so a
// test can check that each request got exactly one.
func newClient(t testing.TB, sys *System) *testrig.Client {
	nc, err := sys.Connect("test-client")
	if err != nil {
		t.Fatal(err)
	}
	return testrig.NewClient(t, nc)
}

func inputRequest(t testing.TB) []byte {
	data, err := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{
		wire.NewFP32("image", []int64{8, 24}, make([]float32, 8*24))}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func decodeReply(t testing.TB, m *nats.Msg) wire.InferReply {
	t.Helper()
	var rep wire.InferReply
	if err := msgpack.Unmarshal(m.Data, &rep); err != nil {
		t.Fatalf("undecodable reply %q: %v", m.Data, err)
	}
	return rep
}

// TestTreeEndToEnd drives the 3-task example tree: every request gets exactly one reply, every reply is complete
// (its leaves' weights sum to 1, checked here independently of the frontend), leaves go through both branches, and
// each leaf's path is a root-to-leaf path of hosted variants.
func TestTreeEndToEnd(t *testing.T) {
	// The burst goes past the tree's capacity; with no early dropping every request must still complete, in time.
	sys, spec := startSystemWith(t, "../../examples/traffic.yaml", Config{Workers: 20},
		func(s *pipeline.Spec) { s.DeadlinePolicy = "none" })
	c := newClient(t, sys)
	const n = 200
	var subjects []string
	data := inputRequest(t)
	for i := 0; i < n; i++ {
		subjects = append(subjects, c.Send(t, spec.Name, data, nats.Header{wire.HeaderTimeout: []string{"5s"}}))
		time.Sleep(2 * time.Millisecond) // the load: about 500 QPS
	}
	replies := c.Wait(t, subjects, 15*time.Second)
	c.ExpectOneReply(t, subjects, 200*time.Millisecond)

	branches := map[string]int{}
	for _, s := range subjects {
		rep := decodeReply(t, replies[s][0])
		if rep.Status != wire.StatusOK {
			t.Fatalf("request %s: status %q (%s), want ok", s, rep.Status, rep.Error)
		}
		sum := new(big.Rat)
		for _, leaf := range rep.Results {
			// The weights are summed here again, independently of the frontend's tracker.
			sum.Add(sum, big.NewRat(1, int64(leaf.Den)))
			if len(leaf.Path) == 0 || !strings.HasPrefix(leaf.Path[0], spec.Root().Name+"/") {
				t.Fatalf("leaf %s path %v does not start at the root task", leaf.ID, leaf.Path)
			}
			last := strings.SplitN(leaf.Path[len(leaf.Path)-1], "/", 2)[0]
			if len(leaf.Path) > 1 {
				branches[last]++
			}
			if len(leaf.Path) == 1 && strings.Count(leaf.ID, ".") != 0 {
				t.Fatalf("leaf %s stopped at the root but is a sub-request", leaf.ID)
			}
			if len(leaf.Path) > 1 && !spec.IsLeaf(last) {
				t.Fatalf("leaf %s ended at %s, which is not a leaf task", leaf.ID, last)
			}
		}
		if sum.Cmp(big.NewRat(1, 1)) != 0 {
			t.Fatalf("request %s: leaf weights sum to %s, want 1", s, sum)
		}
	}
	for _, child := range spec.Root().Children {
		if branches[child] == 0 {
			t.Errorf("no leaf went through branch %s (leaves per branch: %v)", child, branches)
		}
	}
	// Sub-requests travel grouped: one message per (parent item, destination variant), so the child tasks see at
	// most one message per request and child task here (one hosted variant each), however many items.
	var childMsgs, childItems uint64
	for _, w := range sys.Workers {
		if s := w.Serving(); s != "" && !strings.Contains(s, ":"+spec.Root().Name+"/") {
			childMsgs += w.Stats().Messages
			childItems += w.Stats().Items
		}
	}
	if childMsgs > uint64(n*len(spec.Root().Children)) || childItems <= childMsgs {
		t.Errorf("child tasks got %d messages for %d items from %d requests: sub-requests are not grouped", childMsgs, childItems, n)
	}
	st := sys.Frontend.Stats()
	if st.Accepted != n || st.Replied != n || st.StrayLeaves != 0 || st.BadReports != 0 {
		t.Errorf("frontend stats %+v", st)
	}
}
