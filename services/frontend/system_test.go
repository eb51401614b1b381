package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// testSystem is a real embedded JetStream server with the planner (the spec's static allocation) and, optionally,
// workers; tests start their own frontends on it. (services/up cannot be used here: it imports this package.)
type testSystem struct {
	srv     *testrig.Embedded
	spec    *pipeline.Spec
	log     *slog.Logger
	logs    *countingHandler
	workers []*worker.Worker
}

const testSpec = "../../examples/ocr-chain.yaml"

// startTestSystem starts the system; tune, if given, edits the planner's configuration.
func startTestSystem(t testing.TB, workers int, tune ...func(*planner.Config)) *testSystem {
	t.Helper()
	spec, err := pipeline.Load(testSpec)
	if err != nil {
		t.Fatal(err)
	}
	return startSystemOf(t, spec, workers, tune...)
}

// startSystemOf is startTestSystem for another pipeline.
func startSystemOf(t testing.TB, spec *pipeline.Spec, workers int, tune ...func(*planner.Config)) *testSystem {
	t.Helper()
	logs := &countingHandler{counts: map[string]int{}}
	s := &testSystem{srv: testrig.Server(t), spec: spec, logs: logs, log: slog.New(logs)}
	cfg := planner.Config{Pipelines: []*pipeline.Spec{spec}, Storage: jetstream.MemoryStorage, System: "static",
		Logger: s.log}
	for _, f := range tune {
		f(&cfg)
	}
	pl, err := planner.New(s.connect(t, "planner"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "planner", pl.Run)
	s.addWorkers(t, workers)
	return s
}

// addWorkers starts n more workers and waits until the plan's replicas are served (as many as there are workers).
func (s *testSystem) addWorkers(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("w%02d", len(s.workers))
		w, err := worker.New(s.connect(t, id), worker.Config{ID: id, Logger: s.log})
		if err != nil {
			t.Fatal(err)
		}
		s.workers = append(s.workers, w)
		testrig.Run(t, "worker "+id, w.Run)
	}
	p, err := plan.Static(s.spec)
	if err != nil {
		t.Fatal(err)
	}
	want := min(p.Servers(), len(s.workers))
	testrig.Eventually(t, 10*time.Second, fmt.Sprintf("%d planned replicas served", want), func() bool {
		serving := 0
		for _, w := range s.workers {
			if w.Serving() != "" {
				serving++
			}
		}
		return serving == want
	})
}

func (s *testSystem) connect(t testing.TB, name string) *nats.Conn {
	t.Helper()
	return s.srv.Connect(t, name)
}

// startFrontend runs a frontend until the returned stop is called (or the test ends); stop waits until Run returned.
func (s *testSystem) startFrontend(t testing.TB, cfg Config) (*Frontend, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	nc := s.connect(t, "frontend-"+cfg.ID)
	f, stopRun := startServing(t, nc, cfg)
	return f, func() { stopRun(); nc.Close() }
}

// startServing runs a frontend on nc until stop is called (stop waits until Run returned) or the test ends, and waits
// until it serves a pipeline with a plan.
func startServing(t testing.TB, nc *nats.Conn, cfg Config) (f *Frontend, stop func()) {
	t.Helper()
	f, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop = testrig.Run(t, "frontend "+cfg.ID, f.Run)
	testrig.Eventually(t, 10*time.Second, "the frontend sees a pipeline with a plan", func() bool {
		select {
		case <-f.Ready():
			return len(f.Pipelines()) > 0
		default:
			return false
		}
	})
	return f, stop
}

func (s *testSystem) newClient(t testing.TB) *testrig.Client {
	return testrig.NewClient(t, s.connect(t, "client"))
}

func goodRequest(t testing.TB) []byte {
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

// countingHandler is a slog handler that counts records by message (and level), keeping the output of tests quiet.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Message]++
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}
