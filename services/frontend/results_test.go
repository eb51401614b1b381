package frontend

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// TestEveryResultTwice: the test plays the workers of a one-task pipeline. It takes each request's task message
// from the queue and reports its item as two leaves (as a parent with two sub-requests would), in two result
// messages, each sent twice (as a worker whose confirmation was lost does): the second copy of the first leaf comes
// before the other leaf. Each request gets one reply, ok, with its two leaves once each; every copy is confirmed.
func TestEveryResultTwice(t *testing.T) {
	spec, f, nc, cons, c := playWorkers(t)
	const n = 20
	var subjects []string
	for range n {
		subjects = append(subjects, c.Send(t, spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{"20s"}}))
	}
	for i := 0; i < n; {
		batch, err := cons.Fetch(n-i, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			i++
			th, err := wire.ReadTaskHeaders(m.Headers().Get)
			if err != nil {
				t.Fatal(err)
			}
			for sub := range 2 {
				data, _ := msgpack.Marshal(&wire.ResultMessage{RequestID: th.RequestID, Items: []wire.ItemResult{
					{ID: wire.ChildItemID(wire.RootItemID, sub), Den: 2, Path: []string{"a/v"}, Status: wire.ItemOK}}})
				for range 2 {
					if _, err := nc.Request(th.ReplyTo, data, 5*time.Second); err != nil {
						t.Fatalf("result of %s not confirmed: %v", th.RequestID, err)
					}
				}
			}
			_ = m.Ack()
		}
	}
	replies := c.Wait(t, subjects, 20*time.Second)
	c.ExpectOneReply(t, subjects, 300*time.Millisecond)
	for _, subj := range subjects {
		rep := decodeReply(t, replies[subj][0])
		ids := map[string]bool{}
		for _, it := range rep.Results {
			ids[it.ID] = true
		}
		if rep.Status != wire.StatusOK || len(rep.Results) != 2 || len(ids) != 2 {
			t.Errorf("request %s: %s with leaves %+v, want ok with its two leaves", rep.RequestID, rep.Status,
				rep.Results)
		}
	}
	// The second copy of the second leaf came after the reply.
	if st := f.Stats(); st.BadReports != 0 || st.Replied != n || st.StrayLeaves != n {
		t.Errorf("stats %+v, want %d replies, %d stray leaves and no bad report", st, n, n)
	}
}

// playWorkers starts the planner (static) of leafSpec and a frontend on an embedded server, and returns the
// frontend, a connection to play the workers on with the variant's consumer, and a client.
func playWorkers(t *testing.T) (*pipeline.Spec, *Frontend, *nats.Conn, jetstream.Consumer, *testrig.Client) {
	t.Helper()
	spec, err := pipeline.Parse([]byte(leafSpec))
	if err != nil {
		t.Fatal(err)
	}
	srv := testrig.Server(t)
	log := slog.New(slog.DiscardHandler)
	pl, err := planner.New(srv.Connect(t, "planner"), planner.Config{Pipelines: []*pipeline.Spec{spec},
		Storage: jetstream.MemoryStorage, System: "static", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "planner", pl.Run)
	f, _ := startServing(t, srv.Connect(t, "frontend"), Config{ID: "fe", Logger: log})
	nc := srv.Connect(t, "worker")
	var cons jetstream.Consumer
	testrig.Eventually(t, 10*time.Second, "the planner's consumer", func() bool {
		cons, err = bus.BindVariantConsumer(context.Background(), testrig.JetStream(t, nc), spec.Name, "a", "v")
		return err == nil
	})
	return spec, f, nc, cons, testrig.NewClient(t, srv.Connect(t, "client"))
}

// TestLateRequestsWatched: of two requests answered late, one's leaf comes after the reply and the other's never:
// the frontend counts one late request completed and, lateWatch later, one unfinished.
func TestLateRequestsWatched(t *testing.T) {
	defer func(d time.Duration) { lateWatch = d }(lateWatch)
	lateWatch = time.Second
	spec, f, nc, cons, c := playWorkers(t)
	hdr := nats.Header{wire.HeaderTimeout: []string{"200ms"}}
	subjects := []string{c.Send(t, spec.Name, goodRequest(t), hdr), c.Send(t, spec.Name, goodRequest(t), hdr)}
	var msgs []jetstream.Msg
	for len(msgs) < 2 {
		batch, err := cons.Fetch(2-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
	}
	for _, rep := range c.Wait(t, subjects, 5*time.Second) {
		if st := decodeReply(t, rep[0]).Status; st != wire.StatusLate {
			t.Fatalf("reply %s, want late", st)
		}
	}
	th, err := wire.ReadTaskHeaders(msgs[0].Headers().Get)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := msgpack.Marshal(&wire.ResultMessage{RequestID: th.RequestID, Items: []wire.ItemResult{
		{ID: wire.RootItemID, Den: 1, Path: []string{"a/v"}, Status: wire.ItemOK}}})
	if _, err := nc.Request(th.ReplyTo, data, 5*time.Second); err != nil {
		t.Fatalf("a late result not confirmed: %v", err)
	}
	testrig.Eventually(t, 5*time.Second, "one late request completed, one unfinished", func() bool {
		st := f.Stats()
		return st.Late == 2 && st.LateCompleted == 1 && st.LateUnfinished == 1
	})
}

// leafSpec is one leaf task, executed by the test's gate (resultsAcrossRestart).
const leafSpec = `
name: leaf
slo_ms: 1000
tasks:
  - name: a
    variants:
      - name: v
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]
allocation:
  - {task: a, variant: v, replicas: 1, max_batch: 1}
`

// gate is an executor whose first execution waits for open: the test restarts the server meanwhile.
type gate struct {
	started chan struct{}
	open    chan struct{}
	runs    atomic.Int64
}

func (g *gate) Execute(ctx context.Context, batch []executor.Input) ([]executor.Output, error) {
	if g.runs.Add(1) == 1 {
		close(g.started)
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return make([]executor.Output, len(batch)), nil
}
func (*gate) Close() error { return nil }

// TestResultSurvivesAServerRestart: a real nats-server (file storage) is killed while a worker executes a request,
// and the worker's result is sent while the server is down. The server comes back, the worker reconnects first and
// sends its result before the frontend has subscribed again (the frontend reconnects 2 s later), so the server has no
// one to give it to. The worker, unconfirmed, hands the task message back; it is executed again and its result
// confirmed: the request is answered ok, within its deadline. (With a plain publish the result was gone and the
// request answered late.)
func TestResultSurvivesAServerRestart(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("restarts a nats-server")
	}
	srv, err := natsproc.Start(natsproc.Config{Name: "results-restart"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	spec, err := pipeline.Parse([]byte(leafSpec))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	pl, err := planner.New(testrig.Connect(t, srv.URL(), "planner"), planner.Config{Pipelines: []*pipeline.Spec{spec},
		Storage: jetstream.FileStorage, System: "static", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "planner", pl.Run)
	g := &gate{started: make(chan struct{}), open: make(chan struct{})}
	w, err := worker.New(testrig.Connect(t, srv.URL(), "w1"), worker.Config{ID: "w1", Logger: log,
		NewExecutor: func(*pipeline.Spec, string, string, executor.Options) (executor.Executor, error) { return g, nil }})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "worker", w.Run)
	testrig.Eventually(t, 20*time.Second, "the worker serves", func() bool { return w.Serving() != "" })
	nc := testrig.Connect(t, srv.URL(), "frontend", nats.ReconnectWait(2*time.Second), nats.ReconnectJitter(0, 0))
	startServing(t, nc, Config{ID: "fe", Logger: log})
	c := testrig.NewClient(t, testrig.Connect(t, srv.URL(), "client"))
	subj := c.Send(t, spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{"15s"}})
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the request was not executed")
	}
	srv.Kill()
	close(g.open) // the result is sent into the worker's reconnect buffer
	time.Sleep(300 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	rep := decodeReply(t, c.Wait(t, []string{subj}, 20*time.Second)[subj][0])
	if rep.Status != wire.StatusOK {
		t.Fatalf("reply %s %q after %v, want ok: the result was lost on the way (%d executions, worker %+v)",
			rep.Status, rep.Error, c.Latency(subj), g.runs.Load(), w.Stats())
	}
	if st := w.Stats(); st.Unconfirmed == 0 || g.runs.Load() < 2 {
		t.Errorf("worker %+v after %d executions: want its first result unconfirmed and the request executed again",
			st, g.runs.Load())
	}
}
