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
		Storage: jetstream.MemoryStorage, Allocator: planner.AllocatorStatic, Logger: s.log})
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

// testClient sends requests with their own reply subjects on one wildcard subscription and records every reply and
// when it came, so a test can check that each request got exactly one, and how fast.
type testClient struct {
	nc      *nats.Conn
	prefix  string
	mu      sync.Mutex
	sent    map[string]time.Time
	replies map[string][]*nats.Msg
	at      map[string]time.Time // first reply
}

func (s *testSystem) newClient(t testing.TB) *testClient {
	c := &testClient{nc: s.connect(t, "client"), prefix: nats.NewInbox(), sent: map[string]time.Time{},
		replies: map[string][]*nats.Msg{}, at: map[string]time.Time{}}
	if _, err := c.nc.Subscribe(c.prefix+".*", func(m *nats.Msg) {
		now := time.Now()
		c.mu.Lock()
		if len(c.replies[m.Subject]) == 0 {
			c.at[m.Subject] = now
		}
		c.replies[m.Subject] = append(c.replies[m.Subject], m)
		c.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

var sendSeq struct {
	sync.Mutex
	n int
}

// send publishes one request and returns its reply subject.
func (c *testClient) send(t testing.TB, pipelineName string, data []byte, hdr nats.Header) string {
	sendSeq.Lock()
	sendSeq.n++
	n := sendSeq.n
	sendSeq.Unlock()
	m := nats.NewMsg(wire.InferSubject(pipelineName))
	m.Reply = fmt.Sprintf("%s.%d", c.prefix, n)
	m.Data = data
	for k, v := range hdr {
		m.Header[k] = v
	}
	c.mu.Lock()
	c.sent[m.Reply] = time.Now()
	c.mu.Unlock()
	if err := c.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	return m.Reply
}

// wait returns the replies of the given subjects once each has at least one, failing after timeout.
func (c *testClient) wait(t testing.TB, subjects []string, timeout time.Duration) map[string][]*nats.Msg {
	t.Helper()
	end := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		missing := 0
		for _, s := range subjects {
			if len(c.replies[s]) == 0 {
				missing++
			}
		}
		if missing == 0 {
			out := make(map[string][]*nats.Msg, len(subjects))
			for _, s := range subjects {
				out[s] = c.replies[s]
			}
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		if time.Now().After(end) {
			t.Fatalf("%d of %d requests got no reply within %v", missing, len(subjects), timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// latency is how long the first reply to subject took.
func (c *testClient) latency(subject string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[subject].Sub(c.sent[subject])
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
