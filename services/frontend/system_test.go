package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// testSystem is a real embedded JetStream server with the planner (the spec's static allocation) and, optionally,
// workers; tests start their own frontends on it. (services/up cannot be used here: it imports this package.)
type testSystem struct {
	srv     *server.Server
	spec    *pipeline.Spec
	log     *slog.Logger
	logs    *countingHandler
	workers []*worker.Worker
}

const testSpec = "../../examples/ocr-chain.yaml"

func startTestSystem(t testing.TB, workers int) *testSystem {
	t.Helper()
	spec, err := pipeline.Load(testSpec)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	logs := &countingHandler{counts: map[string]int{}}
	s := &testSystem{srv: srv, spec: spec, logs: logs, log: slog.New(logs)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	pl, err := planner.New(s.connect(t, "planner"), planner.Config{Pipelines: []*pipeline.Spec{spec},
		Storage: jetstream.MemoryStorage, System: "static", Logger: s.log})
	if err != nil {
		t.Fatal(err)
	}
	run("planner", pl.Run)
	for i := 0; i < workers; i++ {
		w, err := worker.New(s.connect(t, fmt.Sprintf("w%d", i)), worker.Config{ID: fmt.Sprintf("w%02d", i), Logger: s.log})
		if err != nil {
			t.Fatal(err)
		}
		s.workers = append(s.workers, w)
		run("worker", w.Run)
	}
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := min(p.Servers(), workers)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		serving := 0
		for _, w := range s.workers {
			if w.Serving() != "" {
				serving++
			}
		}
		if serving == want {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after 10s, %d of %d planned replicas are served", serving, want)
		}
	}
	return s
}

func (s *testSystem) connect(t testing.TB, name string) *nats.Conn {
	t.Helper()
	nc, err := bus.ConnectInProcess(s.srv, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startFrontend runs a frontend until the returned stop is called (or the test ends); stop waits until Run returned.
func (s *testSystem) startFrontend(t testing.TB, cfg Config) (*Frontend, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	nc := s.connect(t, "frontend-"+cfg.ID)
	f, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.Run(ctx); err != nil {
			t.Errorf("frontend %s: %v", cfg.ID, err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done; nc.Close() }) }
	t.Cleanup(stop)
	select {
	case <-f.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("frontend not ready after 10s")
	}
	for end := time.Now().Add(10 * time.Second); len(f.Pipelines()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the frontend sees no pipeline with a plan after 10s")
		}
	}
	return f, stop
}

func (s *testSystem) newClient(t testing.TB) *testrig.Client {
	return testrig.NewClient(t, s.connect(t, "client"))
}

func goodRequest(t testing.TB) []byte {
	data, err := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{
		wire.NewFP32("image", []int64{1, 3, 8, 8}, make([]float32, 3*8*8))}})
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
